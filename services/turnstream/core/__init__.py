"""The contract (events, commands, subjects, ids) and the pure turn logic. No I/O here."""
