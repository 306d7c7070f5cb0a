"""MAP-Elites archive, QD metrics, the SQLite store, lineage, lessons memory and export."""
