"""What the admin API and the UI do, apart from HTTP; never imports ``api``, ``ui`` or
``leaders``."""
