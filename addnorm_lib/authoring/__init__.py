"""Tools for writing the book's chapters (the chapters import them; learners never need them)."""
