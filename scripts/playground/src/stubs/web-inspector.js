// Stands in for CopilotKit's web inspector (1 MB, loaded only on localhost development builds; the page turns
// it off with enableInspector={false}). The one export CopilotKit looks for, as a no-op.
export function defineWebInspector() {}
