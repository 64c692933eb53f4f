"""What this server does, in AG-UI 1.0's `AgentCapabilities` shape (`GET /v1/agui/capabilities`).

Built from the same settings and YAML the runs use, so it cannot drift from them: reasoning is declared only
when a stage can stream it (a task with `thinking: enabled`, or the demo model, which reasons in its intent
stage), approvals only when a tool in `agents.yaml` requires one, client tools only while
`AGUI_FRONTEND_TOOLS` is on, image input when a run would take an image (every stage's model in
LLM_IMAGE_MODELS, as `request/images.py` requires, the demo model included; MAX_IMAGES_PER_MESSAGE not 0),
memory while long-term memories are on (USER_MEMORIES_ENABLED; a user can still turn them off in the profile).
An omitted field means "not declared" in the spec; every category this server has an answer for is filled in,
`false` included.
"""

from __future__ import annotations

import ag_ui.core as agui

from agent_runtime.engine.flow.contracts import STAGE_NAMES
from agent_runtime.engine.flow.templates import FlowTemplates
from agent_runtime.engine.flow.tools.grants import ToolGrants
from agent_runtime.engine.runs.request.images import image_policy
from agent_runtime.settings import Settings

CANCEL_ENDPOINT = "POST /v1/sessions/{session_id}/runs/{run_id}/cancel"
RESUME_ENDPOINT = "GET /v1/sessions/{session_id}/runs/{run_id}/events"


def reasoning_streams(settings: Settings, templates: FlowTemplates) -> bool:
    """Whether a run may stream REASONING_* events: the demo model reasons; a provider only where asked to."""
    return settings.is_demo_model or any(templates.call_options(stage, settings).thinking for stage in STAGE_NAMES)


def images_taken(settings: Settings, templates: FlowTemplates) -> bool:
    """Whether a run takes an image part (the same policy the runs check images with)."""
    policy = image_policy({stage: templates.call_options(stage, settings) for stage in STAGE_NAMES}, settings)
    return policy.max_per_message > 0 and policy.blind_stage() is None


def agent_capabilities(settings: Settings, grants: ToolGrants) -> agui.AgentCapabilities:
    """`grants`: the tools the next run gets (after a reload of TOOLS_FILE: the new ones)."""
    templates, tools = grants.templates, grants.by_name
    server_tools = [
        agui.Tool(
            name=name, description=tools[name].description, parameters=tools[name].openai_schema().function.parameters
        )
        for name in grants.granted
    ]
    approvals = bool(grants.requiring_approval)
    reasoning = reasoning_streams(settings, templates)
    images = images_taken(settings, templates)
    return agui.AgentCapabilities(
        identity=agui.IdentityCapabilities(
            name="agent-runtime", type="crewai", description="A social app's assistant: profile, time, arithmetic."
        ),
        transport=agui.TransportCapabilities(
            streaming=True, websocket=False, http_binary=False, push_notifications=False, resumable=True
        ),
        tools=agui.ToolsCapabilities(supported=True, items=server_tools, client_provided=settings.agui_frontend_tools),
        state=agui.StateCapabilities(
            snapshots=True, deltas=True, memory=settings.user_memories_enabled, persistent_state=True
        ),
        reasoning=agui.ReasoningCapabilities(supported=reasoning, streaming=reasoning, encrypted=False),
        multimodal=agui.MultimodalCapabilities(
            input=agui.MultimodalInputCapabilities(image=images, audio=False, video=False, pdf=False, file=False),
            output=agui.MultimodalOutputCapabilities(image=False, audio=False),
        ),
        execution=agui.ExecutionCapabilities(
            code_execution=False, max_execution_time=int(settings.run_timeout_seconds * 1000)
        ),
        human_in_the_loop=agui.HumanInTheLoopCapabilities(
            supported=approvals or settings.agui_frontend_tools,
            approvals=approvals,
            interrupts=approvals,
            # Edits ride `payload.arguments` (the interrupt's responseSchema), not the `editedArgs` this flag names.
            approve_with_edits=False,
            interventions=False,
            feedback=False,
        ),
        # What the categories above have no field for: how to stop a run and resume its stream.
        custom={
            "cancel": {"supported": True, "endpoint": CANCEL_ENDPOINT},
            "resumableStreams": {"supported": True, "endpoint": RESUME_ENDPOINT, "header": "Last-Event-ID"},
            "sseKeepaliveSeconds": settings.sse_keepalive_seconds,
        },
    )
