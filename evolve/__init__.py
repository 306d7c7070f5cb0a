"""The engine: ask/tell loop, search algorithms, mutation operators, operator selection, budget, tracking."""
