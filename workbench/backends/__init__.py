"""The two backends behind the one API: `local` (embedded) and `remote` (a gateway)."""
