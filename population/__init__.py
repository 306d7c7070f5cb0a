"""The genome: PTX grammar, parser, AST, printer, analysis, the edit language, and Kernel variants.

Public surface::

    parse_module(text, filename=None) -> Module          # raises PTXSyntaxError(file, line, column)
    print_module(module, canonical=False) -> str         # byte-identical for nvcc output
    listing(module) -> Listing                           # canonical print with a line map (edit line numbers)
    parse_edit_script(text) -> EditScript; apply_script(kernel, script, operator=...) -> Kernel
    Kernel(module, entry, launch=LaunchConfig(...))      # identity = sha256(canonical PTX + launch)
"""

from population import ast
from population.edits import (
    EditApplyError,
    EditScript,
    EditSyntaxError,
    apply_script,
    diff_text,
    parse_edit_script,
)
from population.errors import PTXSyntaxError
from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module, parse_statements
from population.printer import LineInfo, Listing, listing, print_module, print_statement

__all__ = [
    "EditApplyError",
    "EditScript",
    "EditSyntaxError",
    "Kernel",
    "LaunchConfig",
    "LineInfo",
    "Listing",
    "PTXSyntaxError",
    "apply_script",
    "ast",
    "diff_text",
    "listing",
    "parse_edit_script",
    "parse_module",
    "parse_statements",
    "print_module",
    "print_statement",
]
