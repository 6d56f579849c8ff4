"""Screens (mostly modal dialogs) of the workbench, one per module."""
