"""Load studies of the live features beside caption users: ``probe_load`` (probe jobs) and
``shadow_load`` (shadow comparison), each against a real gateway on an ephemeral port."""
