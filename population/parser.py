"""Read PTX text into the ``population.ast`` dataclasses.

The grammar (``population/grammar.lark``) runs on Lark's LALR(1) parser with the contextual lexer, and the
AST is built by a transformer called during the parse (no intermediate parse tree), which is what makes the
parser fast enough to read every candidate the search produces.

Trivia: every node records the raw source text before it (whitespace, blank lines, comments) in ``trivia``
and its exact spelling in ``layout`` = (key, text), where key is the tuple of field values that text spells.
The printer (``population.printer``) reuses the spelling while the fields still equal key, which gives nvcc's
output back byte for byte and falls back to nvcc's layout for anything an edit changed.

Register resolution: a name written without ``%`` is an ``ast.Register`` when a ``.reg`` in an enclosing
scope declared it (``.reg .pred P1;`` in inline asm), else an ``ast.Symbol`` (labels, variables, params,
functions), or ``ast.Sink`` for ``_``. Names with ``%`` are registers, or special registers (PTX ISA §10).

Values: integer tokens are read as ptxas reads them (a leading 0 is octal: ``[%rd2+010]`` is offset 8,
``%r<010>`` declares 8 registers), so a canonical re-print spells the same values.

Nesting: ``{ }`` scopes nest to any depth (ptxas reads 1,000 levels); nothing here or in the printer and the
analyses recurses per level (``ast.iter_body`` walks them).

Errors: malformed text raises ``PTXSyntaxError`` with file, 1-based line and column and the tokens that
would have been accepted; Lark's own exceptions never escape.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from population import ast
from population.errors import PTXSyntaxError
from population.printer import function_header_key, statement_key

__all__ = ["LINKAGES", "SPECIAL_REGISTERS", "STATE_SPACES", "TYPES", "parse_module", "parse_statements"]

GRAMMAR_PATH = Path(__file__).with_name("grammar.lark")

#: Special registers, PTX ISA 9.0 §10 (names without component suffix; ``%envregN``/``%pmN`` by pattern).
SPECIAL_REGISTERS = frozenset(
    """%tid %ntid %laneid %warpid %nwarpid %ctaid %nctaid %smid %nsmid %gridid %is_explicit_cluster %clusterid
    %nclusterid %cluster_ctaid %cluster_nctaid %cluster_ctarank %cluster_nctarank %lanemask_eq %lanemask_le
    %lanemask_lt %lanemask_ge %lanemask_gt %clock %clock_hi %clock64 %globaltimer %globaltimer_lo
    %globaltimer_hi %reserved_smem_offset_begin %reserved_smem_offset_end %reserved_smem_offset_cap
    %reserved_smem_offset_0 %reserved_smem_offset_1 %total_smem_size %aggr_smem_size %dynamic_smem_size
    %current_graph_exec""".split()
)
_SPECIAL_PATTERN = re.compile(r"%(?:envreg\d+|pm\d+(?:_64)?)$")

#: State spaces, PTX ISA §5.1.
STATE_SPACES = frozenset({"reg", "sreg", "const", "global", "local", "param", "shared", "tex"})
#: Linkage directives, PTX ISA §11.6.
LINKAGES = frozenset({"extern", "visible", "weak", "common"})
#: Fundamental and packed types, PTX ISA §5.2 (plus the opaque texture/sampler/surface types).
TYPES = frozenset(
    """b8 b16 b32 b64 b128 u8 u16 u32 u64 s8 s16 s32 s64 f16 f16x2 bf16 bf16x2 tf32 f32 f64 pred
    e4m3 e5m2 e4m3x2 e5m2x2 e2m3 e3m2 e2m1 e2m3x2 e3m2x2 e2m1x2 ue8m0 ue8m0x2 e2m1x4 s2f6x2 u16x2 s16x2
    texref samplerref surfref""".split()
)
_VECTORS = frozenset({"v2", "v4", "v8"})
_FUNC_PERF_DIRECTIVES = frozenset(
    """maxntid reqntid minnctapersm maxnctapersm maxnreg maxclusterrank reqnctapercluster explicitcluster
    noreturn blocksareclusters abi_preserve abi_preserve_control""".split()
)

# Human names for the grammar's terminals in error messages.
_TERMINAL_NAMES = {
    "SEMI": "';'", "COLON": "':'", "COMMA": "','", "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('",
    "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "PLUS": "'+'", "MINUS": "'-'", "VBAR": "'|'", "BANG": "'!'",
    "VERSION": "'.version'", "TARGET": "'.target'", "ADDRESS_SIZE": "'.address_size'",
    "FUNC_KIND": "'.entry' or '.func'", "LOC": "'.loc'", "FILE": "'.file'", "SECTION": "'.section'",
    "PRAGMA": "'.pragma'", "PASSTHROUGH": "a directive", "DOTWORD": "a directive or type (.reg, .u32, ...)",
    "WORD": "an instruction or label", "PRED": "a guard predicate (@%p)", "REG": "a register (%r1)",
    "NAME": "a name", "NUMBER": "a number", "INT": "an integer", "RANGE": "a register range (<N>)",
    "INIT": "an initializer (= ...)", "$END": "end of input", "RUN": "an instruction or label",
}


_NEWLINE = re.compile(r"\n")
_new = object.__new__
_bisect_right = bisect.bisect_right
_PREDICATES: dict[tuple[str, bool], ast.Predicate] = {}


def _predicate(name: str, negated: bool) -> ast.Predicate:
    """The (shared, immutable) guard ``@name`` / ``@!name``."""
    node = _PREDICATES.get((name, negated))
    if node is None:
        node = ast.Predicate(ast.Register(name), negated)
        if len(_PREDICATES) < 65536:
            _PREDICATES[(name, negated)] = node
    return node


def _flatten(children: list) -> list:
    """Statement children with RUN lists spliced in."""
    out: list = []
    for ch in children:
        if type(ch) is list:
            out.extend(ch)
        else:
            out.append(ch)
    return out


class _Builder(Transformer):
    """Builds AST nodes while the LALR parser reduces; one parse at a time (guarded by ``_LOCK``)."""

    def __init__(self) -> None:
        super().__init__(visit_tokens=False)
        self.reset("", None, frozenset())

    def reset(self, text: str, file: str | None, registers: Iterable[str]) -> None:
        self.text = text
        self.file = file
        self.cursor = 0
        self.line_starts: list[int] | None = None
        self.scopes: list[set[str]] = [set(registers)]
        self.ranges: list[list[tuple[str, int]]] = [[]]

    # -------------------------------------------------------------------------------- helpers
    def _take(self, start: int, end: int) -> tuple[str, str]:
        """(trivia before ``start``, raw text start..end) and advance the cursor."""
        text = self.text
        trivia = text[self.cursor : start]
        self.cursor = end
        return trivia, text[start:end]

    def _loc(self, tok: Token) -> ast.SourceLoc:
        return ast.SourceLoc(tok.line, tok.column, self.file)

    def _error(self, tok: Token, message: str) -> PTXSyntaxError:
        return PTXSyntaxError(message, self.file, tok.line or 0, tok.column or 0)

    def _declared(self, name: str) -> bool:
        if "." in name:  # a vector register's component, v.x (PTX ISA §5.4): declared when v is
            name = name.split(".", 1)[0]
        for names in self.scopes:
            if name in names:
                return True
        for ranges in self.ranges:
            for prefix, count in ranges:
                if name.startswith(prefix):
                    tail = name[len(prefix) :]
                    if tail.isdigit() and int(tail) < count and (tail == "0" or tail[0] != "0"):
                        return True
        return False

    def _int(self, tok: Token, text: str | None = None) -> int:
        """The value of an integer token as ptxas reads it: a leading 0 makes it octal (``[010]`` is 8
        elements, ``%r<010>`` 8 registers, PTX ISA §4.5.1). PTXSyntaxError for a digit 8 or 9 in an octal."""
        s = str(tok) if text is None else text
        if len(s) > 1 and s[0] == "0":
            try:
                return int(s, 8)
            except ValueError:
                raise self._error(tok, f"{s} is not an octal number (a leading 0 makes it octal)") from None
        return int(s)

    def _reg(self, tok: Token) -> ast.Register | ast.SpecialRegister:
        name = str(tok)
        return ast.SpecialRegister(name) if _is_special(name) else ast.Register(name)

    def _name(self, tok: Token) -> ast.Register | ast.Symbol | ast.Sink:
        name = str(tok)
        if self._declared(name):
            return ast.Register(name)
        if name == "_":
            return ast.Sink()
        return ast.Symbol(name)

    def _reg_or_name(self, tok: Token) -> ast.Operand:
        return self._reg(tok) if tok.type == "REG" else self._name(tok)

    def _register(self, tok: Token) -> ast.Register:
        # Predicate positions (guards, p|q, !p) always name a register, declared or not.
        return ast.Register(str(tok))

    # -------------------------------------------------------------------------------- module
    def header(self, c: list) -> tuple:
        pieces = []
        for tok in c:
            pieces.append(self._take(tok.start_pos, tok.end_pos))
        version = c[0].split(None, 1)[1]
        target = tuple(t.strip() for t in c[1].split(None, 1)[1].split(","))
        address_size = int(c[2].split(None, 1)[1]) if len(c) > 2 else 64
        trivia = [p[0] for p in pieces] + [None] * (3 - len(pieces))
        raws = [p[1] for p in pieces] + [None] * (3 - len(pieces))
        key = (version, target, address_size)
        return version, target, address_size, tuple(trivia), (key, tuple(raws))

    def start(self, c: list) -> ast.Module:
        version, target, address_size, header_trivia, layout = c[0]
        return ast.Module(
            version=version,
            target=target,
            address_size=address_size,
            items=_flatten(c[1:]),
            loc=ast.SourceLoc(1, 1, self.file),
            header_trivia=header_trivia,
            trailing_trivia=self.text[self.cursor :],
            layout=layout,
        )

    def stmts(self, c: list) -> list:
        return _flatten(c)

    # -------------------------------------------------------------------------------- functions
    def _func_parts(self, c: list) -> ast.Function:
        i = 0
        specs: list[Token] = []
        if isinstance(c[0], list):
            specs = c[0]
            i = 1
        kind_tok = c[i]
        first = specs[0] if specs else kind_tok
        linkage = []
        for tok in specs:
            if tok.type != "DOTWORD" or tok[1:] not in LINKAGES:
                raise self._error(tok, f"expected a linkage (.extern, .visible, .weak) before {kind_tok}, got {tok!s}")
            linkage.append(tok[1:])
        i += 1
        ret = None
        if isinstance(c[i], tuple) and c[i][0] == "ret":
            ret = c[i][1]
            i += 1
        name_tok = c[i]
        i += 1
        params: list[ast.Param] = []
        if i < len(c) and isinstance(c[i], tuple) and c[i][0] == "params":
            params = c[i][1]
            i += 1
        directives = [d for d in c[i:-1]]
        end_tok = c[-1]
        trivia, raw = self._take(first.start_pos, end_tok.end_pos)
        fn = ast.Function(
            kind=kind_tok[1:],
            name=str(name_tok),
            params=params,
            return_params=ret,
            linkage=tuple(linkage),
            directives=directives,
            body=[] if end_tok.type == "LBRACE" else None,
            loc=self._loc(first),
            trivia=trivia,
        )
        fn.layout = (function_header_key(fn), raw)
        return fn

    def func_head(self, c: list) -> ast.Function:
        fn = self._func_parts(c)
        self.scopes.append(set())
        self.ranges.append([])
        return fn

    def function(self, c: list) -> ast.Function:
        fn: ast.Function = c[0]
        close: Token = c[-1]
        fn.body = _flatten(c[1:-1])
        fn.closing_trivia, _ = self._take(close.start_pos, close.end_pos)
        self.scopes.pop()
        self.ranges.pop()
        return fn

    def func_decl(self, c: list) -> ast.Function:
        return self._func_parts(c)

    def ret_params(self, c: list) -> tuple:
        return ("ret", [p for p in c[1:-1]])

    def params(self, c: list) -> tuple:
        return ("params", [p for p in c[1:-1]])

    def param(self, c: list) -> ast.Param:
        specs: list[Token] = c[0]
        name_tok: Token = c[1]
        dims = c[2] if len(c) > 2 else ()
        info = self._decl_specs(specs, allow_linkage=False)
        space = info["space"] or "param"
        if space not in ("param", "reg"):
            raise self._error(specs[0], f"parameter {name_tok} must be in .param or .reg, got .{space}")
        if info["type"] is None:
            raise self._error(name_tok, f"parameter {name_tok} has no type")
        return ast.Param(
            type=info["type"],
            name=str(name_tok),
            align=info["align"],
            dims=dims,
            attributes=info["attributes"],
            state_space=space,
            loc=self._loc(specs[0]),
        )

    def perf(self, c: list) -> ast.PerfDirective:
        tok: Token = c[0]
        name = tok[1:]
        if name not in _FUNC_PERF_DIRECTIVES:
            raise self._error(tok, f"unknown function directive {tok!s}")
        return ast.PerfDirective(name=name, values=tuple(self._int(v) for v in c[1:]), loc=self._loc(tok))

    # -------------------------------------------------------------------------------- declarations
    def specs(self, c: list) -> list:
        return c

    def dims(self, c: list) -> tuple:
        return tuple(c)

    def dim(self, c: list) -> int | None:
        return self._int(c[0]) if c else None

    def decl_item(self, c: list) -> tuple:
        name_tok = c[0]
        count = None
        dims: tuple = ()
        init = None
        for x in c[1:]:
            if isinstance(x, tuple):
                dims = x
            elif x.type == "RANGE":
                count = self._int(x, x[1:-1])
            else:
                init = x[1:].strip()
        return name_tok, count, dims, init

    def _decl_specs(self, specs: list[Token], allow_linkage: bool) -> dict:
        """Classify the dotted words before a declared name (state space, linkage, .align N, type, vector,
        anything else kept verbatim as an attribute)."""
        info: dict = {"linkage": [], "space": None, "align": None, "type": None, "vector": None, "attributes": []}
        # Dotted words need no space between them (``.reg.u64``, ``.reg .v2.b16``): one (word, token, number
        # after it) per word, the number belonging to the last word of a fused run (``.ptr.global.align 16``).
        words_in: list[tuple[str, Token, Token | None]] = []
        j = 0
        while j < len(specs):
            tok = specs[j]
            if tok.type == "INT":
                raise self._error(tok, f"unexpected number {tok!s} in declaration")
            num = specs[j + 1] if j + 1 < len(specs) and specs[j + 1].type == "INT" else None
            parts = tok[1:].split(".")
            for k, w in enumerate(parts):
                words_in.append((w, tok, num if k == len(parts) - 1 else None))
            j += 2 if num is not None else 1
        i = 0
        n = len(words_in)
        while i < n:
            words, tok, nxt = words_in[i]
            if words == "align":
                if nxt is None:
                    raise self._error(tok, ".align needs a byte count")
                info["align"] = self._int(nxt)
                i += 1
                continue
            if words == "ptr":
                # .ptr [.space] [.align N] (PTX ISA §5.1.6.1, kernel parameter attributes): the state space
                # and alignment of what the pointer points to, not of the parameter. Kept as one attribute.
                attr = ["ptr"]
                if nxt is None and i + 1 < n and words_in[i + 1][0] in ("global", "shared", "const", "local"):
                    i += 1
                    attr.append(words_in[i][0])
                    nxt = words_in[i][2]
                if nxt is None and i + 1 < n and words_in[i + 1][0] == "align" and words_in[i + 1][2] is not None:
                    i += 1
                    attr.append(f"align {words_in[i][2]}")
                elif nxt is not None:
                    raise self._error(nxt, f"unexpected number {nxt!s} after .ptr")
                info["attributes"].append(".".join(attr))
                i += 1
                continue
            if words not in STATE_SPACES | LINKAGES | TYPES | _VECTORS:
                if info["space"] is None and info["type"] is None and not info["linkage"]:
                    raise self._error(tok, f"unknown directive '.{words}'")
                info["attributes"].append(f"{words} {nxt}" if nxt is not None else words)
                i += 1
                continue
            if nxt is not None:
                raise self._error(nxt, f"unexpected number {nxt!s} after .{words}")
            if words in LINKAGES:
                if not allow_linkage:
                    raise self._error(tok, f"linkage .{words} is not allowed here")
                info["linkage"].append(words)
            elif words in STATE_SPACES:
                if info["space"] is not None:
                    raise self._error(tok, f"second state space .{words} in one declaration")
                info["space"] = words
            elif words in _VECTORS:
                info["vector"] = words
            else:
                if info["type"] is not None:
                    raise self._error(tok, f"second type .{words} in one declaration")
                info["type"] = words
            i += 1
        info["attributes"] = tuple(info["attributes"])
        return info

    def _declaration(self, c: list, top_level: bool) -> list:
        specs: list[Token] = c[0]
        items = c[1:-1]
        semi: Token = c[-1]
        info = self._decl_specs(specs, allow_linkage=True)
        first = specs[0]
        if info["space"] is None:
            raise self._error(first, "declaration without a state space (.reg, .shared, .global, .const, .local, .param)")
        if info["type"] is None:
            raise self._error(first, f"declaration of {items[0][0]!s} has no type")
        trivia, raw = self._take(first.start_pos, semi.end_pos)
        loc = self._loc(first)
        if info["space"] == "reg":
            if top_level:
                raise self._error(first, ".reg declarations are only allowed inside a function")
            names = []
            for name_tok, count, dims, init in items:
                if dims or init is not None:
                    raise self._error(name_tok, f"register {name_tok} cannot have array dimensions or an initializer")
                names.append((str(name_tok), count))
                if not name_tok.startswith("%"):
                    if count is None:
                        self.scopes[-1].add(str(name_tok))
                    else:
                        self.ranges[-1].append((str(name_tok), count))
            node = ast.RegDecl(type=info["type"], names=tuple(names), vector=info["vector"], loc=loc, trivia=trivia)
            node.layout = ((node.type, node.names, node.vector), raw)
            return [node]
        attributes = info["attributes"]
        if info["vector"]:
            attributes = (info["vector"], *attributes)
        nodes = []
        for name_tok, count, dims, init in items:
            if count is not None:
                raise self._error(name_tok, f"<N> ranges declare registers only, not .{info['space']} variables")
            nodes.append(ast.VarDecl(
                state_space=info["space"],
                type=info["type"],
                name=str(name_tok),
                align=info["align"],
                dims=dims,
                linkage=tuple(info["linkage"]),
                attributes=attributes,
                initializer=init,
                loc=self._loc(name_tok) if nodes else loc,
            ))
        # A list declaration (".global .u32 a, b;") becomes one VarDecl per name, printed one per statement.
        nodes[0].trivia = trivia
        if len(nodes) == 1:
            nodes[0].layout = (statement_key(nodes[0]), raw)
        return nodes

    def module_decl(self, c: list) -> list:
        return self._declaration(c, top_level=True)

    def body_decl(self, c: list) -> list:
        return self._declaration(c, top_level=False)

    # -------------------------------------------------------------------------------- directives
    def _directive(self, tok: Token) -> ast.Directive:
        kind = tok.type
        s = str(tok)
        m = _DIRECTIVE_NAME.search(s)
        assert m is not None  # the terminal's pattern starts with a dotted name
        name = m.group(1)
        text = s[m.end() :].strip()
        if kind in ("PRAGMA", "PASSTHROUGH"):
            text = text[:-1].rstrip()  # the ';' is printed back by the printer
        trivia, raw = self._take(tok.start_pos, tok.end_pos)
        node = ast.Directive(name=name, text=text, loc=self._loc(tok), trivia=trivia)
        node.layout = ((name, text), raw)
        return node

    def directive(self, c: list) -> ast.Directive:
        return self._directive(c[0])

    def top_directive(self, c: list) -> ast.Directive:
        return self._directive(c[0])

    # -------------------------------------------------------------------------------- statements
    def instruction(self, c: list) -> ast.Instruction:
        first: Token = c[0]
        semi: Token = c[-1]
        pred = None
        i = 0
        if first.type == "PRED":
            p = first[1:]
            negated = p.startswith("!")
            pred = ast.Predicate(ast.Register(p[1:] if negated else p), negated)
            i = 1
        word: Token = c[i]
        operands = tuple(c[i + 1]) if len(c) - i > 2 else ()
        parts = word.split(".")
        trivia, raw = self._take(first.start_pos, semi.end_pos)
        opcode = parts[0]
        modifiers = tuple(parts[1:])
        node = ast.Instruction(
            opcode=opcode, modifiers=modifiers, operands=operands, predicate=pred, loc=self._loc(first), trivia=trivia
        )
        node.layout = ((opcode, modifiers, operands, pred), raw)
        return node

    def _line_starts(self) -> list[int]:
        """Source offsets at which each line of the text starts (computed once per parse)."""
        if self.line_starts is None:
            self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(self.text)]
        return self.line_starts

    def _pos(self, pos: int) -> ast.SourceLoc:
        """The 1-based line and column of source offset ``pos``."""
        starts = self._line_starts()
        k = bisect.bisect_right(starts, pos)
        # SourceLoc is frozen; filling __dict__ directly halves the cost of its __init__ (one per node)
        loc = _new(ast.SourceLoc)
        loc.__dict__.update(line=k, column=pos - starts[k - 1] + 1, file=self.file)
        return loc

    def run(self, c: list) -> list:
        """A RUN token: consecutive labels, instructions, ``.loc`` lines and declaration-free scopes."""
        tok: Token = c[0]
        return self._pieces(tok.start_pos, tok.end_pos)

    def _pieces(self, pos: int, endpos: int) -> list:
        """The statements of a RUN between source offsets pos and endpos. This loop builds most nodes of a
        parse, so it works on locals: trivia is text[cursor:start], raw is text[start:end]."""
        text = self.text
        file = self.file
        starts = self._line_starts()
        out: list = []
        append = out.append
        for m in _PIECE.finditer(text, pos, endpos):
            kind = m.lastgroup
            start = m.start(kind)
            end = m.end()
            k = _bisect_right(starts, start)
            loc = _new(ast.SourceLoc)
            loc.__dict__.update(line=k, column=start - starts[k - 1] + 1, file=file)
            if kind == "instr":
                op_end = m.end("op")
                operands: tuple | None = None
                if text.find("/", op_end, end) < 0:
                    toks = _OPERAND_TOKENS.findall(text, op_end, end - 1)
                    operands = _scan_flat(toks, self) if toks else ()
                    if operands is None:
                        operands = _OperandScanner(self).scan(toks)
                if operands is None:
                    append(self._reference_instruction(start, end))
                    continue
                guard = m.group("guard")
                pred = None if guard is None else _predicate(guard, m.group("neg") == "!")
                full = m.group("op")
                parsed = _OPCODES.get(full)
                if parsed is None:
                    parts = full.split(".")
                    parsed = (parts[0], tuple(parts[1:]))
                    if len(_OPCODES) < 65536:
                        _OPCODES[full] = parsed
                node = ast.Instruction(parsed[0], parsed[1], operands, pred, loc, text[self.cursor : start])
                node.layout = ((parsed[0], parsed[1], operands, pred), text[start:end])
            elif kind == "loc":
                raw = text[start:end]
                body = raw[4:].strip()
                node = ast.Directive("loc", body, loc, text[self.cursor : start])
                node.layout = (("loc", body), raw)
            elif kind == "label":
                raw = text[start:end]
                name = raw[:-1].rstrip()
                node = ast.Label(name, loc, text[self.cursor : start])
                node.layout = (name, raw)
            else:
                scope = ast.Scope([], loc, text[self.cursor : start])
                self.cursor = start + 1
                scope.body = self._pieces(start + 1, end - 1)
                scope.closing_trivia = text[self.cursor : end - 1]
                self.cursor = end
                append(scope)
                continue
            self.cursor = end
            append(node)
        return out

    def _reference_instruction(self, start: int, end: int) -> ast.Instruction:
        registers = set().union(*self.scopes)
        for ranges in self.ranges:
            for prefix, count in ranges:
                registers.update(f"{prefix}{i}" for i in range(count))
        loc = self._pos(start)
        # Pad so that line and column numbers of the re-parse are those of the file.
        pad = "\n" * (loc.line - 1) + " " * (loc.column - 1)
        stmts = _reference_statements(pad + self.text[start:end], registers, self.file)
        if len(stmts) != 1 or not isinstance(stmts[0], ast.Instruction):
            raise PTXSyntaxError("expected one instruction", self.file, loc.line, loc.column)
        node = stmts[0]
        node.loc = loc
        node.trivia, raw = self._take(start, end)
        node.layout = ((node.opcode, node.modifiers, node.operands, node.predicate), raw)
        return node

    def label(self, c: list) -> ast.Label:
        word: Token = c[0]
        if "." in word or ":" in word:
            raise self._error(word, f"label name {word!s} may not contain '.' or ':'")
        trivia, raw = self._take(word.start_pos, c[1].end_pos)
        node = ast.Label(name=str(word), loc=self._loc(word), trivia=trivia)
        node.layout = (node.name, raw)
        return node

    def scope_open(self, c: list) -> ast.Scope:
        tok: Token = c[0]
        trivia, _ = self._take(tok.start_pos, tok.end_pos)
        self.scopes.append(set())
        self.ranges.append([])
        return ast.Scope(body=[], loc=self._loc(tok), trivia=trivia)

    def scope(self, c: list) -> ast.Scope:
        node: ast.Scope = c[0]
        close: Token = c[-1]
        node.body = _flatten(c[1:-1])
        node.closing_trivia, _ = self._take(close.start_pos, close.end_pos)
        self.scopes.pop()
        self.ranges.pop()
        return node

    # -------------------------------------------------------------------------------- operands
    def operands(self, c: list) -> list:
        return c

    def reg(self, c: list) -> ast.Operand:
        return self._reg(c[0])

    def name(self, c: list) -> ast.Operand:
        return self._name(c[0])

    def imm(self, c: list) -> ast.Immediate:
        return ast.Immediate(str(c[0]))

    def pair(self, c: list) -> ast.PredicatePair:
        return ast.PredicatePair(self._register(c[0]), self._register(c[1]))

    def neg(self, c: list) -> ast.Negated:
        return ast.Negated(self._register(c[0]))

    def address(self, c: list) -> ast.Address:
        base_tok: Token = c[0]
        if base_tok.type == "NUMBER":
            base: ast.Register | ast.Symbol | ast.Immediate = ast.Immediate(str(base_tok))
        elif base_tok.type == "REG":
            reg = self._reg(base_tok)
            if isinstance(reg, ast.SpecialRegister):
                raise self._error(base_tok, f"special register {base_tok} cannot be an address base")
            base = reg
        else:
            named = self._name(base_tok)
            if isinstance(named, ast.Sink):
                raise self._error(base_tok, "'_' cannot be an address base")
            base = named
        offset = c[1] if len(c) > 1 else None
        return ast.Address(base, offset)

    def offset_expr(self, c: list) -> ast.OffsetExpr:
        base_tok: Token = c[0]
        value = ast.Immediate(str(c[-1])).value
        if not isinstance(value, int):
            raise self._error(c[-1], f"offset {c[-1]} after {base_tok}+ must be an integer")
        base = self._reg_or_name(base_tok)
        if not isinstance(base, (ast.Register, ast.Symbol)):
            raise self._error(base_tok, f"{base_tok} cannot take an offset")
        return ast.OffsetExpr(base, value)

    def array_element(self, c: list) -> ast.ArrayElement:
        base = self._name(c[0])
        value = ast.Immediate(str(c[1])).value
        if not isinstance(base, ast.Symbol) or not isinstance(value, int):
            raise self._error(c[0], f"{c[0]}[{c[1]}]: an array element needs an array variable and an integer index")
        return ast.ArrayElement(base, value)

    def handle_address(self, c: list) -> ast.HandleAddress:
        base_tok: Token = c[0]
        handle = self._reg_or_name(base_tok)
        if not isinstance(handle, (ast.Register, ast.Symbol)):
            raise self._error(base_tok, f"{base_tok} cannot be a texture, surface or tensor-map handle")
        return ast.HandleAddress((handle, *c[1:]))

    def addr_off(self, c: list) -> int:
        num: Token = c[-1]
        value = ast.Immediate(str(num)).value
        if not isinstance(value, int):
            raise self._error(num, f"address offset {num} must be an integer")
        return -value if c[0].type == "MINUS" else value

    def vector(self, c: list) -> ast.Vector:
        return ast.Vector(tuple(c[1:-1]))

    def parens(self, c: list) -> ast.ParenList:
        return ast.ParenList(tuple(c[1:-1]))


# The RUN terminal of grammar.lark is RUN_PATTERN, (?:LEAD (?:LABEL|INSTR|LOC|SCOPE))++; _PIECE matches one of
# its statements (tests/test_parser_syntax.py checks that the two stay in step).
_LEAD = r"(?:\s++|\/\/[^\n]*+|\/\*[\s\S]*?\*\/)*+"
_LABEL = r"[A-Za-z_$][A-Za-z0-9_$]*+[ \t]*+:(?!:)"
_INSTR = (
    r"(?:@!?[%$A-Za-z_][A-Za-z0-9_$]*+[ \t]*+)?[A-Za-z_$][A-Za-z0-9_$]*+(?:\.[A-Za-z0-9_$:]++)*+"
    r"(?:(?:\s++|\/\/[^\n]*+|\/\*[\s\S]*?\*\/)++(?=[^:;\s])(?:[^;\/]++|\/(?![\/*])|\/\/[^\n]*+|\/\*[\s\S]*?\*\/)*+)?;"
)
_LOCP = r"\.loc(?![A-Za-z0-9_$])[^\n]*+"
# A brace scope holding only labels, instructions and .loc lines (nvcc's one-line inline asm blocks); scopes
# with declarations go through the grammar's scope rule, which tracks the names they declare.
_SCOPE = rf"\{{(?:{_LEAD}(?:{_LABEL}|{_INSTR}|{_LOCP}))*+{_LEAD}\}}"
RUN_PATTERN = f"(?:{_LEAD}(?:{_LABEL}|{_INSTR}|{_LOCP}|{_SCOPE}))++"
# _INSTR with the guard and the opcode captured, for _PIECE (RUN_PATTERN stays free of groups for Lark).
_INSTR_GROUPS = _INSTR.replace(
    r"(?:@!?[%$A-Za-z_][A-Za-z0-9_$]*+[ \t]*+)?[A-Za-z_$][A-Za-z0-9_$]*+(?:\.[A-Za-z0-9_$:]++)*+",
    r"(?:@(?P<neg>!?)(?P<guard>[%$A-Za-z_][A-Za-z0-9_$]*+)[ \t]*+)?(?P<op>[A-Za-z_$][A-Za-z0-9_$]*+(?:\.[A-Za-z0-9_$:]++)*+)",
)
assert _INSTR_GROUPS != _INSTR
_PIECE = re.compile(
    f"{_LEAD}(?:(?P<label>{_LABEL})|(?P<instr>{_INSTR_GROUPS})|(?P<loc>{_LOCP})|(?P<scope>{_SCOPE}))"
)
_OPCODES: dict[str, tuple[str, tuple[str, ...]]] = {}
_DIRECTIVE_NAME = re.compile(r"\.([A-Za-z_]+)")
# Operand tokens of grammar.lark (REG, NUMBER, NAME, punctuation), whitespace skipped by findall; any other
# character comes out as a one-character token that the scanner rejects.
_OPERAND_TOKENS = re.compile(
    r"%[A-Za-z0-9_$]+(?:\.[A-Za-z][A-Za-z0-9_]*)?"
    r"|-?(?:0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|0[xX][0-9a-fA-F]+[uU]?|0[bB][01]+[uU]?"
    r"|[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|[0-9]+[uU]?)"
    r"(?![A-Za-z0-9_$.])"
    r"|[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z][A-Za-z0-9_]*)?"
    r"|\S"
)
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_$")


_SPECIAL_CACHE: dict[str, bool] = {}


def _is_special(name: str) -> bool:
    """True for a special register name (``%tid.x``, ``%envreg3``), PTX ISA §10."""
    hit = _SPECIAL_CACHE.get(name)
    if hit is None:
        base = name.split(".", 1)[0]
        hit = base in SPECIAL_REGISTERS or _SPECIAL_PATTERN.match(base) is not None
        if len(_SPECIAL_CACHE) < 65536:
            _SPECIAL_CACHE[name] = hit
    return hit


_PERCENT_CACHE: dict[str, ast.Register | ast.SpecialRegister] = {}
_IMMEDIATE_CACHE: dict[str, ast.Immediate] = {}


def _percent(name: str) -> ast.Register | ast.SpecialRegister:
    """The (shared, immutable) operand node for a ``%`` name."""
    node = _PERCENT_CACHE.get(name)
    if node is None:
        node = ast.SpecialRegister(name) if _is_special(name) else ast.Register(name)
        if len(_PERCENT_CACHE) < 65536:
            _PERCENT_CACHE[name] = node
    return node


def _immediate(text: str) -> ast.Immediate:
    node = _IMMEDIATE_CACHE.get(text)
    if node is None:
        node = ast.Immediate(text)
        if len(_IMMEDIATE_CACHE) < 65536:
            _IMMEDIATE_CACHE[text] = node
    return node


def _scan_flat(toks: list[str], b: _Builder) -> tuple | None:
    """The common operand list, ``x, y, [base+off]`` with registers, names and numbers only, without the
    recursive scanner's calls; None for anything else (vectors, lists, pairs, negation, odd addresses)."""
    out = []
    n = len(toks)
    i = 0
    while True:
        t = toks[i]
        c = t[0]
        if c == "%":
            if i + 1 < n and toks[i + 1] == "|":
                return None
            out.append(_percent(t))
            i += 1
        elif c == "[":
            # [base] or [base+off] with a register or name base and a decimal offset
            if i + 2 >= n:
                return None
            base = toks[i + 1]
            bc = base[0]
            if bc == "%":
                node = _percent(base)
                if type(node) is not ast.Register:
                    return None
            elif bc in _NAME_START and base != "_":
                node = ast.Register(base) if b._declared(base) else ast.Symbol(base)
            else:
                return None
            if toks[i + 2] == "]":
                out.append(ast.Address(node, None))
                i += 3
            elif (toks[i + 2] == "+" and i + 4 < n and toks[i + 4] == "]" and toks[i + 3].isdigit()
                  and (toks[i + 3][0] != "0" or toks[i + 3] == "0")):  # a leading 0 is octal: the scanner
                out.append(ast.Address(node, int(toks[i + 3])))
                i += 5
            else:
                return None
        elif c in _NAME_START:
            if (i + 1 < n and toks[i + 1] == "|") or t == "_":
                return None
            out.append(ast.Register(t) if b._declared(t) else ast.Symbol(t))
            i += 1
        elif c.isdigit() or ((c == "-" or c == ".") and len(t) > 1):
            out.append(_immediate(t))
            i += 1
        else:
            return None
        if i == n:
            return tuple(out)
        if toks[i] != "," or i + 1 == n:
            return None
        i += 1


class _OperandScanner:
    """Reads an instruction's operand list by the ``operand`` rules of grammar.lark (regex tokens plus
    recursive descent); returns None for anything it does not accept, including comments, so that the
    token-level grammar decides (and words the error)."""

    __slots__ = ("b", "i", "n", "toks")

    def __init__(self, builder: _Builder) -> None:
        self.b = builder

    def scan(self, toks: list[str]) -> tuple | None:
        """The operands spelled by ``toks`` (``_OPERAND_TOKENS`` of a comment-free operand text)."""
        if not toks:
            return ()
        self.toks = toks
        self.n = len(toks)
        self.i = 0
        try:
            out = self._list(None)
        except (IndexError, _Reject):
            return None
        if self.i != self.n:
            return None
        return tuple(out)

    def _list(self, close: str | None) -> list:
        toks = self.toks
        out = []
        if close is not None and toks[self.i] == close:
            self.i += 1
            return out
        while True:
            out.append(self._operand())
            if self.i == self.n:
                if close is None:
                    return out
                raise _Reject
            t = toks[self.i]
            if t == ",":
                self.i += 1
                continue
            if close is not None and t == close:
                self.i += 1
                return out
            raise _Reject

    def _operand(self) -> ast.Operand:
        toks = self.toks
        t = toks[self.i]
        self.i += 1
        c = t[0]
        if c == "%" or c in _NAME_START:
            if self.i < self.n and toks[self.i] == "|":
                t2 = toks[self.i + 1]
                if not (t2[0] == "%" or t2[0] in _NAME_START):
                    raise _Reject
                self.i += 2
                return ast.PredicatePair(ast.Register(t), ast.Register(t2))
            if c == "%":
                node: ast.Operand = ast.SpecialRegister(t) if _is_special(t) else ast.Register(t)
            elif self.b._declared(t):
                node = ast.Register(t)
            else:
                node = ast.Sink() if t == "_" else ast.Symbol(t)
            if self.i + 2 < self.n and toks[self.i] == "[" and toks[self.i + 2] == "]":
                # a[i] (ast.ArrayElement)
                value = ast.Immediate(toks[self.i + 1]).value if _is_number(toks[self.i + 1]) else None
                if type(node) is not ast.Symbol or not isinstance(value, int):
                    raise _Reject
                self.i += 3
                return ast.ArrayElement(node, value)
            if self.i < self.n and toks[self.i] == "+":
                # reg+imm / var+imm (ast.OffsetExpr)
                num = toks[self.i + 1]
                if not isinstance(node, (ast.Register, ast.Symbol)) or not _is_number(num):
                    raise _Reject
                value = ast.Immediate(num).value
                if not isinstance(value, int):
                    raise _Reject
                self.i += 2
                return ast.OffsetExpr(node, value)
            return node
        if _is_number(t):
            return ast.Immediate(t)
        if t == "[":
            return self._address()
        if t == "{":
            return ast.Vector(tuple(self._list("}")))
        if t == "(":
            return ast.ParenList(tuple(self._list(")")))
        if t == "!":
            t2 = toks[self.i]
            if not (t2[0] == "%" or t2[0] in _NAME_START):
                raise _Reject
            self.i += 1
            return ast.Negated(ast.Register(t2))
        raise _Reject

    def _address(self) -> ast.Address:
        toks = self.toks
        t = toks[self.i]
        self.i += 1
        c = t[0]
        base: ast.Register | ast.Symbol | ast.Immediate
        if c == "%":
            if _is_special(t):
                raise _Reject
            base = ast.Register(t)
        elif c in _NAME_START:
            if self.b._declared(t):
                base = ast.Register(t)
            elif t == "_":
                raise _Reject
            else:
                base = ast.Symbol(t)
        elif _is_number(t):
            base = ast.Immediate(t)
        else:
            raise _Reject
        t = toks[self.i]
        self.i += 1
        if t == "]":
            return ast.Address(base, None)
        if t == "," and not isinstance(base, ast.Immediate):
            # [handle, {coords}] / [tex, sampler, {coords}] (ast.HandleAddress)
            return ast.HandleAddress((base, *self._list("]")))
        sign = 1
        if t == "+" or t == "-":
            sign = -1 if t == "-" else 1
            t = toks[self.i]
            self.i += 1
        if not _is_number(t):
            raise _Reject
        value = ast.Immediate(t).value
        if not isinstance(value, int) or toks[self.i] != "]":
            raise _Reject
        self.i += 1
        return ast.Address(base, sign * value)


def _is_number(t: str) -> bool:
    """Whether operand token ``t`` is a NUMBER (``_OPERAND_TOKENS`` gives other characters one at a time)."""
    c = t[0]
    return c.isdigit() or ((c == "-" or c == ".") and len(t) > 1)


class _Reject(Exception):
    """The operand scanner met something outside the operand rules."""


_LOCK = threading.Lock()
_PARSER: Lark | None = None
_BUILDER: _Builder | None = None


def _build(grammar: str) -> tuple[Lark, _Builder]:
    """An LALR parser (contextual lexer) for ``grammar`` that builds the AST while it parses."""
    builder = _Builder()
    parser = Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        transformer=builder,
        start=["start", "stmts"],
        maybe_placeholders=False,
    )
    return parser, builder


def _parser() -> tuple[Lark, _Builder]:
    global _PARSER, _BUILDER
    if _PARSER is None or _BUILDER is None:
        _PARSER, _BUILDER = _build(GRAMMAR_PATH.read_text())
    return _PARSER, _BUILDER


_REF_LOCK = threading.Lock()
_REF_PARSER: Lark | None = None
_REF_BUILDER: _Builder | None = None


def reference_grammar() -> str:
    """grammar.lark without the RUN fast path: every instruction is read token by
    token by the ``operand`` rules. Used for exact error positions and to check the fast path against."""
    text = GRAMMAR_PATH.read_text()
    text = text.replace("?stmt: run\n     | instruction\n", "?stmt: instruction\n")
    return text.replace("run: RUN\n", "")


def reference_parser() -> tuple[Lark, _Builder]:
    """The Lark parser built from ``reference_grammar()`` and its AST builder (one parse at a time)."""
    global _REF_PARSER, _REF_BUILDER
    if _REF_PARSER is None or _REF_BUILDER is None:
        _REF_PARSER, _REF_BUILDER = _build(reference_grammar())
    return _REF_PARSER, _REF_BUILDER


def reference_parse_module(text: str, file: str | None = None) -> ast.Module:
    """``text`` parsed with the token-level reference grammar only (no whole-instruction fast path): the
    oracle the fast path is checked against, and the slow side of experiments/parse_throughput.py.
    Raises PTXSyntaxError like ``parse_module``."""
    parser, builder = reference_parser()
    with _REF_LOCK:
        builder.reset(text, file, ())
        try:
            return parser.parse(text, start="start")
        except UnexpectedInput as e:
            raise _convert(e, text, file, whole_module=True) from None
        finally:
            builder.reset("", None, ())


def _reference_statements(text: str, registers: Iterable[str], file: str | None) -> list:
    parser, builder = reference_parser()
    with _REF_LOCK:
        builder.reset(text, file, registers)
        try:
            return parser.parse(text, start="stmts")
        except UnexpectedInput as e:
            raise _convert(e, text, file, whole_module=False) from None
        finally:
            builder.reset("", None, ())


def _expected_text(expected: Iterable[str]) -> str:
    names = sorted({_TERMINAL_NAMES.get(e, e) for e in expected if not e.startswith("__")})
    if not names:
        return ""
    if len(names) > 8:
        names = [*names[:8], "..."]
    return "expected one of: " + ", ".join(names)


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


_LEADING_DIRECTIVE = re.compile(r"[ \t\r\n]*(\.[A-Za-z_][A-Za-z0-9_]*)")
# Dotted words the grammar accepts at the start of a statement (PTX ISA §5, §11).
_KNOWN_DIRECTIVES = STATE_SPACES | LINKAGES | TYPES | _FUNC_PERF_DIRECTIVES | {
    "version", "target", "address_size", "entry", "func", "loc", "file", "section", "pragma", "align",
    "callprototype", "alias", "branchtargets", "calltargets",
}


def _unknown_directive(text: str, pos: int) -> tuple[str, int] | None:
    """If the statement around ``pos`` starts with a dotted word the grammar does not know, name it."""
    start = max(text.rfind(";", 0, pos), text.rfind("{", 0, pos), text.rfind("}", 0, pos), text.rfind("\n", 0, pos))
    m = _LEADING_DIRECTIVE.match(text, start + 1)
    if m is None:
        return None
    word = m.group(1)[1:]
    if word in _KNOWN_DIRECTIVES:
        return None
    return word, m.start(1)


def _convert(err: UnexpectedInput, text: str, file: str | None, whole_module: bool = True) -> PTXSyntaxError:
    """Lark's exception as a PTXSyntaxError: position, the unexpected token or character, the tokens the
    grammar would have accepted there, and an unknown leading directive named as such."""
    pos = getattr(err, "pos_in_stream", None)
    if (isinstance(err, UnexpectedToken) and err.token.type == "$END") or isinstance(err, UnexpectedEOF):
        pos = len(text)
    if pos is None:
        pos = len(text)
    unknown = _unknown_directive(text, pos)
    if unknown is not None and text[unknown[1] + len(unknown[0]) + 1 :].strip() == "":
        unknown = None  # a directive cut short by the end of the text: report the truncation
    if unknown is not None:
        line, col = _line_col(text, unknown[1])
        return PTXSyntaxError(f"unknown directive '.{unknown[0]}'", file, line, col)
    line, col = _line_col(text, pos)
    if isinstance(err, UnexpectedCharacters):
        ch = text[pos] if pos < len(text) else ""
        expected = _expected_text(err.allowed or ())
        msg = f"unexpected character {ch!r}" + (f"; {expected}" if expected else "")
    elif isinstance(err, UnexpectedToken) and err.token.type != "$END":
        expected = _expected_text(err.expected)
        shown = str(err.token)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        msg = f"unexpected {shown.strip()!r}" + (f"; {expected}" if expected else "")
    else:
        expected = _expected_text(getattr(err, "expected", ()) or ())
        end = "unexpected end of input (truncated file?)" if whole_module else "unexpected end of input"
        msg = end + (f"; {expected}" if expected else "")
    return PTXSyntaxError(msg, file, line, col)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: a parse allocates tens of thousands of acyclic nodes, and the
    collections they would trigger cost about 15% of parse time."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse_module(text: str, filename: str | None = None) -> ast.Module:
    """Parse one PTX module (a ``.ptx`` file's text) into an ``ast.Module``.

    Every node keeps its trivia and spelling so ``print_module(parse_module(t)) == t`` for nvcc output.
    Raises PTXSyntaxError (file, line, column, message with the expected tokens) on malformed text.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_module expects str, got {type(text).__name__}")
    parser, builder = _parser()
    with _LOCK, _no_gc():
        builder.reset(text, filename, ())
        try:
            return parser.parse(text, start="start")
        except UnexpectedInput as e:
            raise _convert(e, text, filename) from None
        finally:
            builder.reset("", None, ())


def parse_statements(
    text: str, registers: Iterable[str] = frozenset(), filename: str | None = None
) -> list[ast.Statement]:
    """Parse body-level statements (instructions, labels, declarations, scopes, ``.loc``/``.pragma``), e.g. the
    replacement lines of an edit.

    Names in ``registers`` (without ``%``; ``%`` names are registers anyway), and names declared by a
    ``.reg`` inside ``text``, resolve to ``ast.Register``. The returned nodes carry ``loc`` relative to
    ``text`` but no trivia or spelling, so they print in nvcc's layout wherever they are inserted.
    Raises PTXSyntaxError on malformed text.
    """
    parser, builder = _parser()
    with _LOCK:
        builder.reset(text, filename, registers)
        try:
            stmts = parser.parse(text, start="stmts")
        except UnexpectedInput as e:
            raise _convert(e, text, filename, whole_module=False) from None
        finally:
            builder.reset("", None, ())
    for s in stmts:
        _strip_layout(s)
    return stmts


def _strip_layout(node: ast.Statement) -> None:
    for event, s, _lst, _i, _depth in ast.iter_body([node]):
        s.trivia = None
        if event == "enter":
            s.closing_trivia = None
        else:
            s.layout = None
