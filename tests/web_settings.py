"""The product's settings for the web servers the tests start as subprocesses (tests/live/stack.py
`start_web`), with the suite's password hasher (tests/hashers.py) in place of Django's.

With the product's 1,000,000-iteration hasher such a server verified a test user's one-iteration
hash, then upgraded it (a new hash at 1,000,000 iterations: about 0.3 s of a core a login), and ran
the same iterations again on every wrong password (`harden_runtime`, which evens out the time a
weaker stored hash would take): a few percent of the suite's CPU. Everything else is the product's."""

from sparkops.settings import *  # noqa: F403

PASSWORD_HASHERS = ["tests.hashers.OneIterationPBKDF2"]
