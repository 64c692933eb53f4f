"""A run's records in the database: the start and finish statements, budget holds, lease renewal and the sweep,
the runs list."""
