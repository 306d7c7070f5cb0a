"""Every corpus file (tests/data and ../shared/ptx-corpus): parse, byte-identical print, parse(print(m)) == m,
the canonical print re-parses to the module without debug directives, the fast path equals the token-level
reference grammar, and ptxas accepts both prints for the module's target."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from population import ast
from population.parser import parse_module, reference_parse_module
from population.printer import is_debug_directive, listing, print_module, without_debug

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted((ROOT / "tests" / "data").glob("*.ptx")) + sorted((ROOT.parent / "shared" / "ptx-corpus").glob("*.ptx"))
IDS = [f"{p.parent.name}/{p.name}" for p in CORPUS]


def test_corpus_is_present() -> None:
    names = {p.name for p in CORPUS}
    # the CUDA sources written for the tests; their PTX is committed
    for stem in ("elementwise", "reduce_shfl", "smem_transpose", "inline_asm_scopes", "cp_async", "bulk_mbarrier",
                 "wgmma_sm90a", "cluster_dsmem", "half_bf16", "calls_printf", "rmsnorm_bf16", "debug_g"):
        assert f"{stem}.ptx" in names
        assert (ROOT / "tests" / "data" / f"{stem}.cu").exists()


@pytest.fixture(scope="module", params=CORPUS, ids=IDS)
def corpus(request: pytest.FixtureRequest) -> tuple[Path, str, ast.Module]:
    path: Path = request.param
    text = path.read_text()
    return path, text, parse_module(text, str(path))


def test_print_is_byte_identical(corpus) -> None:
    _, text, module = corpus
    assert print_module(module) == text


def test_reparse_equals(corpus) -> None:
    _, _text, module = corpus
    assert parse_module(print_module(module)) == module


def test_canonical_reparses_to_module_without_debug(corpus) -> None:
    _, _, module = corpus
    canonical = print_module(module, canonical=True)
    again = parse_module(canonical)
    assert again == without_debug(module)
    assert print_module(again, canonical=True) == canonical
    # a module built without trivia prints the same in both modes
    assert print_module(again) == canonical
    assert "//" not in canonical and "\t.loc\t" not in canonical and "\t.file\t" not in canonical
    assert listing(module).text == canonical


def test_debug_directives_kept_in_faithful_print(corpus) -> None:
    _, text, module = corpus
    n_loc = text.count("\t.loc\t")
    found = 0

    def walk(body: list) -> None:
        nonlocal found
        for s in body:
            if isinstance(s, ast.Scope):
                walk(s.body)
            elif is_debug_directive(s) and s.name == "loc":
                found += 1

    for f in module.functions:
        walk(f.body or [])
    assert found == n_loc


def test_fast_path_equals_reference_grammar(corpus) -> None:
    _, text, module = corpus
    ref = reference_parse_module(text)
    assert ref == module
    assert print_module(ref) == text


def test_instruction_count_matches_listing(corpus) -> None:
    _, _text, module = corpus
    n = 0

    def walk(body: list) -> None:
        nonlocal n
        for s in body:
            if isinstance(s, ast.Scope):
                walk(s.body)
            elif isinstance(s, ast.Instruction):
                n += 1

    for f in module.functions:
        walk(f.body or [])
    # in the canonical print every instruction is one line that ends with ';' and is not a declaration
    lines = listing(module).lines
    expected = sum(1 for li in lines if li.text.endswith(";") and li.text.strip()[0] not in ".{};")
    assert sum(1 for li in lines if isinstance(li.node, ast.Instruction)) == n
    assert n == expected


@pytest.mark.skipif(shutil.which("ptxas") is None and not (ROOT / "evaluators" / "toolchain.py").exists(),
                    reason="no ptxas on PATH and no evaluators.toolchain")
@pytest.mark.parametrize("canonical", [False, True], ids=["faithful", "canonical"])
def test_ptxas_accepts_print(corpus, canonical: bool) -> None:
    from evaluators.toolchain import ToolchainNotFound, compile_ptx

    _, _, module = corpus
    try:
        result = compile_ptx(print_module(module, canonical=canonical), arch=module.target[0])
    except ToolchainNotFound as e:
        pytest.skip(f"no ptxas: {e}")
    entries = {f.name for f in module.entries}
    assert entries <= set(result.resources)
    assert len(result.cubin) > 0


def _drop_spellings(body: list) -> None:
    for s in body:
        if isinstance(s, ast.Scope):
            _drop_spellings(s.body)
        else:
            s.layout = None


def test_default_layout_with_source_trivia_round_trips_and_assembles(corpus) -> None:
    """Every statement printed in nvcc's layout between its original trivia (what an edit that touches every
    line produces): still parses back equal, and ptxas still accepts it."""
    path, text, _ = corpus
    module = parse_module(text, str(path))
    for fn in module.functions:
        fn.layout = None
        _drop_spellings(fn.body or [])
    for item in module.items:
        if not isinstance(item, ast.Function):
            item.layout = None
    printed = print_module(module)
    assert parse_module(printed) == module
    try:
        from evaluators.toolchain import ToolchainNotFound, compile_ptx
    except ImportError:
        pytest.skip("evaluators.toolchain not importable")
    try:
        compile_ptx(printed, arch=module.target[0], verify_only=True)
    except ToolchainNotFound as e:
        pytest.skip(f"no ptxas: {e}")
