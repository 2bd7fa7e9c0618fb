"""Developer and CI scripts of httpbus (not shipped with the package)."""
