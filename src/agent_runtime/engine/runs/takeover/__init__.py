"""Runs that survive their process (issue 33): another replica takes over a run whose lease expired and continues
it from its last stored step, under the same run id (docs/api.md, "Runs that survive their replica").

The steps are the ones the run stores anyway: its input (the start), the tool calls each model reply asked for (a
visible row, written at once) and their results (written before the next call), plus one more statement, the turn's
decided intent before the execution stage begins (`resume_point`). A taken-over run:
- without a resume point, ran nothing irreversible: its turn runs again from the intent call;
- with one, goes on as a turn resumed after approvals does: the execution stage with the stored tool calls and
  results; a call of the last reply without a stored result ran again only if its tool is idempotent, else its
  result says its outcome is unknown (at most once), an approval or frontend call says it was not run;
- keeps its run id and its event log, whose new part starts at seq takeovers * 1,000,000 + 1;
- is charged, once, what the dead process had sent but not stored (its last renewal's estimate).
"""
