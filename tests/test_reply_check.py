

def test_mcp_resume_refuses_a_misfit_and_admits_it_when_asked(tmp_path):
    """The MCP `resume` tool checks a reply as `flow resume` does; `admit_bad_reply` admits it."""
    import anyio

    from tests.test_mcp import call, session

    program, runs, run_id, call_id = paused_run(tmp_path, REVIEW)
    before = stored(runs, run_id)

    async def scenario():
        async with session(runs) as client:
            refused = (await call(client, "resume", {"run": run_id, "call": call_id,
                                                     "reply": {"Ok": "Aprove"}})).structured_content
            assert refused["exitCode"] == 2 and refused["ending"] == "refused"
            assert refused["refusal"]["path"] == "$.Ok" and refused["refusal"]["example"] == {"Ok": "Approve"}
            assert stored(runs, run_id) == before
            view = (await call(client, "history", {"run": run_id})).structured_content
            assert view["open"][0]["reply"]["example"] == {"Ok": "Approve"}
            admitted = (await call(client, "resume", {"run": run_id, "call": call_id, "reply": {"Ok": "Aprove"},
                                                      "admit_bad_reply": True})).structured_content
            assert admitted["exitCode"] == 0 and admitted["output"].startswith("bad reply: $.Ok")

    anyio.run(scenario)
