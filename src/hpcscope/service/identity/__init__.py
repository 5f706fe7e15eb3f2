"""Identity: the user directory, roles and the accounts users coordinate."""
