"""The test suite's password hasher: Django's own PBKDF2-SHA256 at one iteration.

Django hashes a password with 1,000,000 PBKDF2 iterations (about 0.3 s of a core here), and every
persona fixture creates a user: the suite spent minutes hashing. This hasher writes the same
`pbkdf2_sha256$<iterations>$…` format with the iteration count in it, so a web server that a test
starts as a subprocess, with the product's settings, still verifies these passwords (reading the
count from the hash) — Django's own advice for test suites, without a second format."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneIterationPBKDF2(PBKDF2PasswordHasher):
    iterations = 1
