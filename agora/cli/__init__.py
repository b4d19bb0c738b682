"""The ``agora`` command line: ``main`` assembles the app; one module per command group."""
