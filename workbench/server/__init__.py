"""`sandbox-workbench serve`: the gateway protocol over HTTP from the local backend."""
