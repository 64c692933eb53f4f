// Stands in for shiki (syntax highlighting, ~10 MB of grammars): code blocks in answers render as plain text.
// Streamdown asks only for these three names.
export const bundledLanguages = {};

export async function createHighlighter() {
  return {
    codeToTokens: (code) => ({
      bg: "transparent",
      fg: "inherit",
      tokens: code.split("\n").map((line) => [{ content: line, color: "inherit", bgColor: "transparent", offset: 0 }]),
    }),
  };
}

export const createJavaScriptRegexEngine = () => ({});
