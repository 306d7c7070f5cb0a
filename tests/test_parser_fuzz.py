"""Mutated corpus text (deleted spans, inserted characters, truncation, duplicated spans) either parses, prints
back byte for byte and round-trips, or raises PTXSyntaxError with a real location; nothing else escapes."""

from __future__ import annotations

import random
from pathlib import Path

from population.errors import PTXSyntaxError
from population.parser import parse_module
from population.printer import print_module, without_debug

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["reduce_shfl.ptx", "calls_printf.ptx", "inline_asm_scopes.ptx", "bulk_mbarrier.ptx"]
CHARS = list(";{}[](),.:%@!|_-+/*\"'=<>#0123456789abcxyz \n\t$")


def mutate(text: str, rng: random.Random) -> str:
    i = rng.randrange(len(text))
    op = rng.randrange(4)
    if op == 0:
        return text[:i] + text[i + rng.randrange(1, 20) :]
    if op == 1:
        return text[:i] + rng.choice(CHARS) + text[i:]
    if op == 2:
        return text[:i]
    j = rng.randrange(len(text))
    return text[:i] + text[j : j + rng.randrange(1, 30)] + text[i:]


def test_mutations_parse_or_raise_located_errors() -> None:
    rng = random.Random(1234)
    texts = [(ROOT / "tests" / "data" / name).read_text() for name in SOURCES]
    parsed = errors = 0
    for _ in range(300):
        text = mutate(rng.choice(texts), rng)
        try:
            m = parse_module(text, "fuzz.ptx")
        except PTXSyntaxError as e:
            errors += 1
            lines = text.split("\n")
            assert e.file == "fuzz.ptx" and 1 <= e.line <= len(lines)
            assert 1 <= e.column <= len(lines[e.line - 1]) + 1
            continue
        parsed += 1
        assert print_module(m) == text
        assert parse_module(print_module(m)) == m
        assert parse_module(print_module(m, canonical=True)) == without_debug(m)
    # both outcomes occur: the mutations are not all harmless nor all fatal
    assert parsed > 30 and errors > 30
