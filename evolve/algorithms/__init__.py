"""Ask/tell search algorithms: MAP-Elites, random search, hill climbing, GA, islands."""
