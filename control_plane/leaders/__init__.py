"""The control plane's elected roles, one a module; :mod:`.roles` lists them."""
