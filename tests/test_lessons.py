"""Lessons memory: stage counts, failure normalisation, prompt lines, persistence and the shared knowledge store."""

import pytest

from archive.knowledge import KnowledgeStore, StageCounts, open_knowledge
from archive.lessons import Lessons, normalise_reason, sanitize_text, script_kind
from archive.store import CandidateRow, Store


def feed(lessons: Lessons) -> None:
    # hints/MODIFIER: 6 proposals -> 1 apply error, 1 compile error, 1 wrong result, 3 ok of which 2 improved
    lessons.record("hints", "MODIFIER", "apply_error", reason="line 12: no load at line 12")
    lessons.record("hints", "MODIFIER", "compile_error", reason="a.ptx, line 40; error : Unknown modifier")
    lessons.record("hints", "MODIFIER", "wrong_result", reason="7 of 4096 elements differ")
    lessons.record("hints", "MODIFIER", "ok", improved=True)
    lessons.record("hints", "MODIFIER", "ok", improved=True)
    lessons.record("hints", "MODIFIER", "ok")
    # llm/REPLACE: 4 proposals, 3 fail ptxas with the same cause on different lines/registers
    for line, reg in ((10, "%rd4"), (22, "%r17"), (31, "%f9")):
        lessons.record("llm", "REPLACE", "compile_error",
                       reason=f"ptxas /tmp/k.ptx, line {line}; error   : Unknown symbol '{reg}'")
    lessons.record("llm", "REPLACE", "ok")


def test_stage_counts_and_failure_aggregation():
    lessons = Lessons()
    feed(lessons)
    s = {(x.operator, x.edit_kind): x for x in lessons.summary()}
    assert s[("hints", "MODIFIER")].counts == StageCounts(proposed=6, applied=5, compiled=4, passed=3, improved=2)
    assert s[("llm", "REPLACE")].counts == StageCounts(proposed=4, applied=4, compiled=1, passed=1, improved=0)
    assert s[("llm", "REPLACE")].failures == [
        ("compile_error", "ptxas <file>; error : Unknown symbol '%reg'", 3)]
    lines = lessons.top_lines(10)
    assert lines[0] == "helps: MODIFIER edits by hints improved 2/6, passed gate 3/6"
    assert lines[1] == ("fails: REPLACE edits by llm did not compile 3/4 "
                        "(commonest: ptxas <file>; error : Unknown symbol '%reg')")
    assert lines[2] == "recent compile_error: ptxas <file>; error : Unknown symbol '%reg'"
    # the three llm compile messages dedupe to one; newest first
    assert lines[3:] == ["recent wrong_result: N of N elements differ",
                         "recent compile_error: <file>; error : Unknown modifier"]
    rows = lessons.rows()
    assert rows[1] == {"operator": "llm", "edit_kind": "REPLACE", "proposed": 4, "applied": 4, "compiled": 1,
                       "passed": 1, "improved": 0, "prior_proposed": 0, "prior_applied": 0, "prior_compiled": 0,
                       "prior_passed": 0, "prior_improved": 0,
                       "top_failure": "compile_error: ptxas <file>; error : Unknown symbol '%reg'"}
    with pytest.raises(ValueError, match="unknown status"):
        lessons.record("x", "DELETE", "exploded")
    with pytest.raises(ValueError, match="improved=True"):
        lessons.record("x", "DELETE", "compile_error", improved=True)


def test_normalise_and_sanitize():
    assert normalise_reason("ptxas info: x\nptxas /t/a.ptx, line 9; error : Arguments mismatch for 'ld' at %rd10") \
        == "ptxas <file>; error : Arguments mismatch for 'ld' at %reg"
    assert normalise_reason("line 3-4: register %r1 undefined, ld.global.v4 sm_90") == \
        "line N: register %reg undefined, ld.global.v4 sm_90"
    s = sanitize_text("use .nc // then\n/* evict */ \x1b[2J\u202e" + "x" * 300)
    assert "//" not in s and "/*" not in s and "*/" not in s and "\x1b" not in s and "\u202e" not in s
    assert "\n" not in s and len(s) == 200 and s.endswith("...")
    assert sanitize_text("a ///* b */") == "a b"
    assert script_kind("MODIFIER 3 +nc\nDELETE 5") == "DELETE+MODIFIER"
    assert script_kind("FROB 1") == "UNPARSED"


def test_no_gain_and_seed_lines():
    lessons = Lessons()
    for _ in range(4):
        lessons.record("schedule", "REPLACE", "ok")
        lessons.record("seed", "SEED", "ok", improved=True)
    lessons.record("unroll", "REPLACE", "ok", improved=True)
    for _ in range(2):
        lessons.record("unroll", "REPLACE", "ok")
    assert lessons.top_lines(5) == ["helps: REPLACE edits by unroll improved 1/3, passed gate 3/3",
                                    "no gain: REPLACE edits by schedule passed the gate 4/4 but never improved"]


def test_notes_are_sanitised_and_shown():
    lessons = Lessons()
    for _ in range(3):
        lessons.record("hints", "MODIFIER", "ok")
    stored = lessons.note("prefer .cs on the store // it streams\n.reg .b32 %r<9>;", source="critic:smollm2")
    assert stored == "prefer .cs on the store it streams .reg .b32 %r<9>;"
    assert lessons.top_lines(4) == ["no gain: MODIFIER edits by hints passed the gate 3/3 but never improved",
                                    "lesson (critic:smollm2): prefer .cs on the store it streams .reg .b32 %r<9>;"]
    assert lessons.note("  \n ", source="critic") == ""


def test_persisted_in_run_store_with_the_batch(tmp_path):
    store = Store(tmp_path / "run.sqlite")
    lessons = Lessons(store)
    feed(lessons)
    lessons.note("vector loads help", source="critic")
    store.record_batch([CandidateRow(identity="k1", status="ok", objective=1.0)], ("latest", {"n": 1}),
                       lessons=lessons)
    assert store.query("SELECT COUNT(*) FROM lesson_events")[0][0] == 10
    # a resumed run rebuilds the same memory from the store
    again = Lessons(Store(tmp_path / "run.sqlite"))
    assert [(x.operator, x.edit_kind, x.counts, x.failures) for x in again.summary()] == \
           [(x.operator, x.edit_kind, x.counts, x.failures) for x in lessons.summary()]
    assert again.top_lines(8) == lessons.top_lines(8)
    # events buffered but not committed are not in the store
    lessons.record("hints", "MODIFIER", "ok")
    assert store.query("SELECT COUNT(*) FROM lesson_events")[0][0] == 10
    assert lessons.flush() == 1
    assert store.query("SELECT COUNT(*) FROM lesson_events")[0][0] == 11


def test_knowledge_shared_between_two_runs(tmp_path):
    kpath = tmp_path / "knowledge" / "k.sqlite"
    run1 = Store(tmp_path / "run1.sqlite")
    k1 = KnowledgeStore(kpath)
    l1 = Lessons(run1, k1, family="rmsnorm", gpu="h200", run="run1")
    feed(l1)
    l1.note("MODIFIER .cs on stores helped", source="critic")
    run1.record_batch([], ("latest", {}), lessons=l1)
    # a run on another GPU sees nothing; a second run on the same key starts from run 1's counts
    other = Lessons(None, KnowledgeStore(kpath), family="rmsnorm", gpu="b200")
    assert other.top_lines(5) == []
    l2 = Lessons(Store(tmp_path / "run2.sqlite"), KnowledgeStore(kpath), family="rmsnorm", gpu="h200", run="run2")
    assert l2.counts == {}
    assert l2.prior[("hints", "MODIFIER")] == StageCounts(6, 5, 4, 3, 2)
    lines = l2.top_lines(5)
    assert lines[0] == "helps: MODIFIER edits by hints improved 2/6, passed gate 3/6"
    assert lines[1] == ("fails: REPLACE edits by llm did not compile 3/4 "
                        "(commonest: ptxas <file>; error : Unknown symbol '%reg')")
    assert "lesson (critic): MODIFIER .cs on stores helped" in lines
    # run 2's outcomes add to the shared counts
    l2.record("hints", "MODIFIER", "ok", improved=True)
    l2.flush()
    assert KnowledgeStore(kpath).counts("rmsnorm", "h200")[("hints", "MODIFIER")] == StageCounts(7, 6, 5, 4, 3)
    assert KnowledgeStore(kpath).failures("rmsnorm", "h200")[0].count == 3
    assert open_knowledge(None) is None and open_knowledge("none") is None
    with pytest.raises(ValueError, match="family"):
        Lessons(None, k1)


MERGER = """
import sys
sys.path.insert(0, {repo!r})
from archive.knowledge import KnowledgeStore, Note, StageCounts
k = KnowledgeStore(sys.argv[1])
for i in range(40):
    k.merge("rmsnorm", "h200", {{("hints", "MODIFIER"): StageCounts(2, 2, 1, 1, 1)}},
            {{("hints", "MODIFIER", "compile_error", "bad"): 1}}, [Note(f"n{{i}}", sys.argv[2])], run=sys.argv[2])
"""


def test_knowledge_concurrent_runs_add_up(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "merge.py"
    script.write_text(MERGER.format(repo=str(Path(__file__).resolve().parents[1])))
    kpath = tmp_path / "k.sqlite"
    procs = [subprocess.Popen([sys.executable, str(script), str(kpath), f"run{i}"]) for i in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    k = KnowledgeStore(kpath)
    assert k.counts("rmsnorm", "h200") == {("hints", "MODIFIER"): StageCounts(240, 240, 120, 120, 120)}
    assert k.failures("rmsnorm", "h200")[0].count == 120
    assert len(k.notes("rmsnorm", "h200", limit=1000)) == 120
