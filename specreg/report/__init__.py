"""Audit and run reports (Markdown with SVGs beside it, or one self-contained HTML file) and their plots."""
