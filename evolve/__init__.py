"""The evolution loop, in rooms: ``experiment/`` (the store and what it records), ``round/`` (one round: candidates,
checks, screening, evaluation, decision, publication), ``loop.py`` (the overnight loop) with ``options.py``,
``views/`` (what people read: show, rounds, report) and ``roles/`` (the LLM roles and the runtime they share)."""
