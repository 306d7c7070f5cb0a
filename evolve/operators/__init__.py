"""Mutation operators: each turns a parent kernel into an edit script (population.edits)."""
