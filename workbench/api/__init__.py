"""Public, headless API of sandbox-workbench (exports are filled in by the lead)."""
