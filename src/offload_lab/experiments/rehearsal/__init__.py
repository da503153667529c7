"""Claims of a rehearsal (``offload-lab campaign rehearse``): the campaign ran against an emulated pod.

Measures nothing and has no notebook: the rehearsal's record (what the pod would do, what the client measured) is
read by the ``rehearsal.*`` claims (``claims.py``) so that a rehearsal's paper says what it is.
"""
