"""Errors raised while reading PTX text."""

from __future__ import annotations


class PTXSyntaxError(ValueError):
    """PTX text that the grammar (``population/grammar.lark``) does not accept, or a declaration it cannot map
    onto the AST.

    message: what was wrong, in words (e.g. ``"unexpected ';', expected one of: a register, a name"``);
    file: the file name given to the parser (None for text without one); line, column: 1-based position of the
    offending character. ``str()`` is ``"file:line:col: message"`` (``"<ptx>"`` when file is None).
    """

    def __init__(self, message: str, file: str | None = None, line: int = 0, column: int = 0) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.file or '<ptx>'}:{self.line}:{self.column}: {self.message}"

    def __reduce__(self) -> tuple:
        return (PTXSyntaxError, (self.message, self.file, self.line, self.column))
