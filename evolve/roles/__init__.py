"""The LLM roles of a round, under one roof: ``runtime/`` (what every role shares: backends, tools, sandbox,
transcripts, config), ``analysis/``, ``researcher/``, ``proposals/``, ``implement/`` and the ``explorer``."""
