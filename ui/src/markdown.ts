// The model's answers as markdown: parsed by marked, code blocks highlighted
// by highlight.js (a few common languages: each costs bundle size), and the HTML sanitised by
// DOMPurify before it reaches the page. Raw HTML in the model's text is shown
// as text, not rendered (marked's html tokens are escaped), and DOMPurify
// removes whatever else could run (event handlers, javascript: URLs); links
// open in a new tab with rel="noopener noreferrer", and images are links (no
// remote loads). Tool output never comes
// here: it stays plain text.

import DOMPurify from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import diff from "highlight.js/lib/languages/diff";
import go from "highlight.js/lib/languages/go";
import json from "highlight.js/lib/languages/json";
import python from "highlight.js/lib/languages/python";
import typescript from "highlight.js/lib/languages/typescript";
import { Marked, type Tokens } from "marked";

hljs.registerLanguage("bash", bash);
hljs.registerLanguage("diff", diff);
hljs.registerLanguage("go", go);
hljs.registerLanguage("json", json);
hljs.registerLanguage("python", python);
hljs.registerLanguage("typescript", typescript);
hljs.registerAliases(["js", "javascript", "jsx", "tsx"], { languageName: "typescript" });

/** escapeHTML makes text safe to put between tags or in a quoted attribute. */
export function escapeHTML(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

const marked = new Marked({
  gfm: true,
  async: false,
  renderer: {
    // Raw HTML in the answer is shown as the text it is.
    html: ({ text }: Tokens.HTML | Tokens.Tag) => escapeHTML(text),
    // No remote images: an image URL the model writes could carry data out
    // when the page loads it. It is shown as a link instead.
    image: ({ href, text }: Tokens.Image) => `<a href="${escapeHTML(href)}">${escapeHTML(text !== "" ? text : href)}</a>`,
    code: ({ text, lang }: Tokens.Code) => {
      const name = (lang ?? "").trim().split(/\s+/)[0]!.toLowerCase();
      const known = name !== "" && hljs.getLanguage(name) !== undefined;
      const body = known ? hljs.highlight(text, { language: name, ignoreIllegals: true }).value : escapeHTML(text);
      const cls = known ? ` class="hljs language-${escapeHTML(name)}"` : "";
      return `<pre class="code"><code${cls}>${body}</code></pre>\n`;
    },
  },
});

let hooked = false;

function purifier(): typeof DOMPurify {
  if (!hooked) {
    hooked = true;
    DOMPurify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A" && node.hasAttribute("href")) {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer");
      }
    });
  }
  return DOMPurify;
}

/** renderMarkdown turns the model's markdown into sanitised HTML. */
export function renderMarkdown(text: string): string {
  const html = marked.parse(text) as string;
  return purifier().sanitize(html, {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["img", "style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
    FORBID_ATTR: ["style"],
  });
}
