"""SQLite store: schema, numbered migrations and queries. WAL; one writer per row."""
