"""The search: population, islands, selection, operator choice, budget, and the loop."""
