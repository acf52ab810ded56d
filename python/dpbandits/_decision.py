"""The decision :meth:`dpbandits.Policy.decide` returns (a named tuple, so it unpacks)."""

from typing import NamedTuple


class Decision(NamedTuple):
    """One decision of :meth:`dpbandits.Policy.decide`: ``decision_id``, 1-based in decision
    order (the decision service's ``decision_id``), names it for
    :meth:`dpbandits.Policy.observe_decision`; ``arm`` is the arm to play (contextual: the chosen
    action's index in the round's action set)."""

    decision_id: int
    arm: int
