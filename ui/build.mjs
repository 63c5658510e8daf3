// Builds the console into assets/ (committed, embedded by the Go package
// ui): one JS bundle, one CSS file, index.html. The output depends only on
// the sources and the locked tool versions, so CI rebuilds it and fails on
// any difference.

import { copyFileSync, mkdirSync, rmSync } from "node:fs";

import * as esbuild from "esbuild";

rmSync("assets", { recursive: true, force: true });
mkdirSync("assets");
await esbuild.build({
  entryPoints: { app: "src/main.tsx" },
  outdir: "assets",
  bundle: true,
  // Whitespace and syntax only: renaming identifiers would make the output
  // shift with unrelated changes (e.g. new types in the generated protocol.ts).
  minifyWhitespace: true,
  minifySyntax: true,
  format: "esm",
  target: ["es2022", "chrome110", "firefox110", "safari16"],
  jsx: "automatic",
  jsxImportSource: "preact",
  // The console runs on the project's own SDK, from source.
  alias: { "@trellis/sdk": "../sdk/src/browser.ts" },
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
});
copyFileSync("src/index.html", "assets/index.html");
