"""A Locust test whose users are peakload's: every request is stamped chunk by chunk and stored
as a peakload run (`peakload runs`, `report`, `sla`, `compare`, the UI), and Locust's own UI and
CSV get TTFT, TPOT, ITL and E2E as request types.

    peakload sim --port 8000 --preset fixed &
    locust -f examples/locustfile.py --headless -u 4 -r 4 -t 30s --host http://127.0.0.1:8000/v1
    # or distributed: locust -f examples/locustfile.py --master ...  and  --worker  on each host

The store is PEAKLOAD_DATABASE_URL (else the embedded PostgreSQL), as for every command.
"""

from __future__ import annotations

from loadgen.locust import LLMUser
from workers import locust_store

locust_store.install()


class ChatUser(LLMUser):
    """The spec's workload, one request after another (closed loop, no think time)."""

    spec = "locust.toml"


class JourneyUser(LLMUser):
    """A custom journey: a two-turn conversation, the second turn asking about the first."""

    spec = "locust.toml"
    abstract = True  # drop this line to run it beside ChatUser (Locust splits users by weight)
    weight = 1

    def journey(self) -> None:
        self.new_conversation()
        ask = {"role": "user", "content": "Name three rivers."}
        first = self.chat([ask], session=True)
        if first.ok:
            answer = {"role": "assistant", "content": first.text or ""}
            follow = {"role": "user", "content": "Which one is longest?"}
            self.chat([ask, answer, follow], max_tokens=16, session=True)
