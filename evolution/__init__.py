"""The search: population, islands, selection, operator choice, budget, and the loop; drivers/ sits
above the loop (bench, rejudge, a whole model in parts) and nothing here imports it."""
