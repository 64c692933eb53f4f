// Stands in for mermaid (diagrams, ~3 MB): a diagram in an answer shows its source instead.
export default {
  initialize() {},
  async render() {
    throw new Error("diagrams are not rendered in the playground");
  },
};
