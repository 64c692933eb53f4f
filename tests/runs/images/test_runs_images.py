"""Images in a user message: taken from AG-UI `image` parts and REST `images`, stored with the message, listed
and snapshotted by reference (never another user's), sent to a model that sees them, refused for one that does not."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import User
from tests.runs.conftest import INTENT_CONTRACT_LINE, Harness, MakeHarness, crewai_config, intent_direct
from tests.stubs.deepseek_stub import IMAGE_TOKENS, image_urls

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABXvMqGgAAAABJRU5ErkJggg=="
)
PNG_B64 = base64.b64encode(PNG).decode()
JPEG_B64 = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 32).decode()


def image_part(data: str = PNG_B64, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "data", "value": data, "mimeType": mime}}


def agui_input(thread_id: str, content: Any, message_id: str = "u-1") -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "run-1",
        "protocolVersion": "1.0",
        "state": {},
        "messages": [{"id": message_id, "role": "user", "content": content}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


async def test_an_agui_image_reaches_the_model_is_stored_and_served_to_its_owner_only(
    h: Harness, make_user: Callable[[], User]
) -> None:
    owner, other = make_user(), make_user()
    thread_id = await h.new_session(owner)
    h.stub.enqueue(intent_direct("A red pixel."))
    parts = [{"type": "text", "text": "What is this?"}, image_part()]

    result = await h.agui(owner, agui_input(thread_id, parts))

    assert result.status == 200, result.body
    (request,) = h.stub.requests
    user_turn = request.messages[-1]
    assert user_turn["content"] == [
        {"type": "text", "text": "What is this?" + INTENT_CONTRACT_LINE},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
    ]
    # The image's tokens are in the provider's prompt_tokens, and so in the billed row.
    rows = await h.rows(owner, thread_id)
    billed = [r for r in rows if r.input_tokens]
    assert billed and billed[0].input_tokens >= IMAGE_TOKENS
    (user_row,) = [r for r in rows if r.role == "user"]
    (stored,) = user_row.metadata.images  # type: ignore[union-attr]
    assert (stored.mime_type, stored.data, stored.size) == ("image/png", PNG_B64, len(PNG))

    listed = await h.visible(owner, thread_id)
    path = f"/v1/sessions/{thread_id}/images/{stored.id}"
    assert listed[0]["content_parts"] == [
        {"type": "text", "text": "What is this?", "id": None, "source": None},
        {
            "type": "image",
            "text": None,
            "id": stored.id,
            "source": {"type": "url", "value": path, "mimeType": "image/png"},
        },
    ]
    assert listed[0]["metadata"]["images"][0]["data"] is None  # the bytes are served, not listed
    served = await h.client.get(path, headers=owner.headers)
    assert served.status_code == 200 and served.content == PNG
    assert served.headers["content-type"] == "image/png"
    assert (await h.client.get(path, headers=other.headers)).status_code == 404
    assert (await h.client.get(path)).status_code == 401

    # The next run's snapshot shows the image as a part naming the endpoint; the model sees it again in history.
    h.stub.enqueue(intent_direct("Still red."))
    again = await h.agui(owner, agui_input(thread_id, "And now?", message_id="u-2"))
    snapshot = again.of_type("MESSAGES_SNAPSHOT")[0]["messages"]
    assert snapshot[0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "id": stored.id, "source": {"type": "url", "value": path, "mimeType": "image/png"}},
    ]
    assert image_urls(h.stub.requests[-1].messages) == [f"data:image/png;base64,{PNG_B64}"]


async def test_a_rest_run_takes_images_and_passes_a_url_to_the_provider(h: Harness, user: User) -> None:
    session_id = await h.new_session(user)
    h.stub.enqueue(intent_direct("A cat."))

    result = await h.run(user, session_id, "Who is this?", images=[{"url": "https://example.com/cat.jpg"}])

    assert result.status == 200, result.body
    assert image_urls(h.stub.requests[0].messages) == ["https://example.com/cat.jpg"]
    listed = await h.visible(user, session_id)
    assert listed[0]["content_parts"][1]["source"]["value"] == "https://example.com/cat.jpg"


async def test_a_stage_on_deepseek_v4_pro_refuses_images_naming_the_model(
    make_harness: MakeHarness, user: User, tmp_path: Path
) -> None:
    config = crewai_config(tmp_path, execution={"model": "deepseek/deepseek-v4-pro"})
    async with make_harness(crewai_config_dir=config) as h:
        session_id = await h.new_session(user)
        result = await h.agui(user, agui_input(session_id, [{"type": "text", "text": "see"}, image_part()]))
        assert result.status == 422, result.body
        assert "deepseek/deepseek-v4-pro" in result.body and "does not accept images" in result.body
        assert h.stub.requests == [] and await h.rows(user, session_id) == []
        # Text alone still runs on that configuration.
        h.stub.enqueue(intent_direct("ok"))
        assert (await h.agui(user, agui_input(session_id, "just text"))).status == 200


async def test_images_that_break_a_rule_are_422_naming_it(make_harness: MakeHarness, user: User) -> None:
    async with make_harness(max_image_bytes=1024, max_images_per_message=2) as h:
        session_id = await h.new_session(user)
        big = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 2000).decode()
        cases = {
            "declared image/png, but its bytes are image/jpeg": [image_part(JPEG_B64, "image/png")],
            "at most 1024 bytes (MAX_IMAGE_BYTES)": [image_part(big)],
            "at most 2 images (MAX_IMAGES_PER_MESSAGE)": [image_part()] * 3,
            "audio parts are not taken; supported: text and image parts": [
                {"type": "audio", "source": {"type": "data", "value": "AAAA", "mimeType": "audio/wav"}}
            ],
            "'image/gif' is not supported": [image_part(mime="image/gif")],
            "an image URL must be https": [
                {"type": "image", "source": {"type": "url", "value": "http://10.0.0.1/x.png"}}
            ],
            "must be base64": [image_part("not base64!")],
        }
        for expected, parts in cases.items():
            result = await h.agui(user, agui_input(session_id, [{"type": "text", "text": "look"}, *parts]))
            assert result.status == 422, (expected, result.body)
            assert expected in result.body, (expected, result.body)
        assert h.stub.requests == [] and await h.rows(user, session_id) == []


async def test_the_offline_demo_model_takes_an_image_and_says_what_it_was_shown(
    make_harness: MakeHarness, make_user: Callable[[], User]
) -> None:
    async with make_harness(llm_model=None, deepseek_api_key=None) as demo:
        user = make_user()
        thread_id = await demo.new_session(user)
        result = await demo.agui(user, agui_input(thread_id, [{"type": "text", "text": "What is this?"}, image_part()]))
        assert result.status == 200, result.body
        assert demo.stub.requests == []
        reply = "".join(e["delta"] for e in result.of_type("TEXT_MESSAGE_CONTENT"))
        assert 'You said: "What is this? [image: image/png]"' in reply, reply


LOCAL_URLS = {
    "https://127.0.0.1/x.png": "127.0.0.1 is a loopback, private or link-local address",
    "https://127.1/x.png": "127.1 is a loopback, private or link-local address",
    "https://2130706433/x.png": "2130706433 is a loopback, private or link-local address",
    "https://[::1]/x.png": "::1 is a loopback, private or link-local address",
    "https://[::ffff:10.0.0.1]/x.png": "::ffff:10.0.0.1 is a loopback, private or link-local address",
    "https://169.254.169.254/latest/meta-data": "169.254.169.254 is a loopback, private or link-local address",
    "https://[fe80::1]/x.png": "fe80::1 is a loopback, private or link-local address",
    "https://10.1.2.3/x.png": "10.1.2.3 is a loopback, private or link-local address",
    "https://192.168.0.10:8443/x.png": "192.168.0.10 is a loopback, private or link-local address",
    "https://localhost/x.png": "localhost names a local host",
    "https://LOCALHOST./x.png": "localhost names a local host",
    "https://api.localhost/x.png": "api.localhost names a local host",
    "https://metadata.google.internal/x": "metadata.google.internal names a local host",
    "https://printer.local/x.png": "printer.local names a local host",
    "https://intranet/x.png": "intranet names a local host",
    "https://user:pw@example.com/x.png": "must not carry credentials (user:password@)",
    "https://token@example.com/x.png": "must not carry credentials (user:password@)",
    "https://[::1/x.png": "an image URL must be a valid https URL",
}


async def test_image_urls_to_local_hosts_or_with_credentials_are_422_on_rest_and_agui(h: Harness, user: User) -> None:
    session_id = await h.new_session(user)
    for url, expected in LOCAL_URLS.items():
        rest = await h.client.post(
            f"/v1/sessions/{session_id}/runs",
            json={"message": "look", "images": [{"url": url}]},
            headers=user.headers,
        )
        assert rest.status_code == 422, (url, rest.text)
        assert expected in rest.json()["error"]["details"][0]["msg"], (url, rest.text)
        part = {"type": "image", "source": {"type": "url", "value": url}}
        agui = await h.agui(user, agui_input(session_id, [{"type": "text", "text": "look"}, part]))
        assert agui.status == 422, (url, agui.body)
        assert expected in agui.body, (url, agui.body)
    assert h.stub.requests == [] and await h.rows(user, session_id) == []
    # A public host, by name or by address, is still passed on.
    for url in ("https://example.com/cat.jpg", "https://93.184.215.14/cat.jpg"):
        h.stub.enqueue(intent_direct("A cat."))
        assert (await h.run(user, session_id, "look", images=[{"url": url}])).status == 200


async def test_an_image_url_over_the_limit_is_a_422_on_agui_as_on_rest(h: Harness, user: User) -> None:
    session_id = await h.new_session(user)
    url = "https://example.com/" + "a" * 3 * 2048
    part = {"type": "image", "source": {"type": "url", "value": url, "mimeType": "image/png"}}
    agui = await h.agui(user, agui_input(session_id, [{"type": "text", "text": "look"}, part]))
    assert agui.status == 422, agui.body
    (detail,) = json.loads(agui.body)["error"]["details"]
    assert (detail["loc"][-2:], detail["msg"]) == (["source", "value"], "an image URL has at most 2048 characters")
    rest = await h.client.post(
        f"/v1/sessions/{session_id}/runs", json={"message": "look", "images": [{"url": url}]}, headers=user.headers
    )
    assert rest.status_code == 422, rest.text
    assert [d["loc"] for d in rest.json()["error"]["details"]] == [["body", "images", 0, "url"]]
    assert h.stub.requests == [] and await h.rows(user, session_id) == []
