"""Widgets of the workbench, one per module."""
