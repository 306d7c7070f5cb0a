"""The genome: PTX grammar, parser, AST, printer, analysis, the edit language, and Kernel variants."""
