import react from "@vitejs/plugin-react";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const stub = (name) => fileURLToPath(new URL(`./src/stubs/${name}.js`, import.meta.url));

// Built into the Python package: FastAPI serves these files at /playground/ (no Node at run time).
export default defineConfig({
  plugins: [react()],
  base: "./",
  // The chat's markdown renderer (streamdown) lazy-loads every shiki grammar and mermaid, and CopilotKit its
  // inspector: most of 18 MB that a playground does not need. Plain code blocks instead.
  resolve: {
    alias: [
      { find: /^shiki(\/.*)?$/, replacement: stub("shiki") },
      { find: /^mermaid$/, replacement: stub("mermaid") },
      { find: /^@copilotkit\/web-inspector$/, replacement: stub("web-inspector") },
    ],
  },
  build: {
    outDir: "../../src/agent_runtime/playground/static",
    emptyOutDir: true,
    // CopilotKit's chat is most of the bundle; one warning threshold that fits it, not a split per library.
    chunkSizeWarningLimit: 4000,
  },
});
