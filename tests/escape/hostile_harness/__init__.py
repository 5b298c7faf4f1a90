"""A hostile candidate harness for the escape suite (tests/escape): it follows the harness protocol and tries
every door the trust boundary closes (DESIGN.md, "Trust boundaries")."""
