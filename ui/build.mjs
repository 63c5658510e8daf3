// Builds the console into assets/ (committed, embedded by the Go package
// ui): one JS bundle, one CSS file, index.html. The output depends only on
// the sources and the locked tool versions, so CI rebuilds it and fails on
// any difference.

import { copyFileSync, mkdirSync, readFileSync, rmSync } from "node:fs";

import * as esbuild from "esbuild";

// The markdown libraries (pinned, so their output never shifts) are minified
// whole, local names included, before they are bundled: half the size.
const minifyVendored = {
  name: "minify-vendored",
  setup(build) {
    build.onLoad({ filter: /[\\/]node_modules[\\/](dompurify|highlight\.js|marked)[\\/].*\.m?js$/ }, async (args) => {
      const { code } = await esbuild.transform(readFileSync(args.path, "utf8"), { minify: true, format: "esm", target: "es2022", legalComments: "none" });
      return { contents: code, loader: "js" };
    });
  },
};

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
  plugins: [minifyVendored],
});
copyFileSync("src/index.html", "assets/index.html");
