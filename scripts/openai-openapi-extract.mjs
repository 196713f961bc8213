#!/usr/bin/env node
// Extracts the schemas the conformance test (test/openapi-conformance.test.ts) validates against
// from OpenAI's published OpenAPI document, with every schema they reference, into
// test/fixtures/openai-openapi/schemas.json. The whole document is 3.4 MB; the answers the
// gateway writes need about a fifth of it, and only its validation keywords.
//
//   node scripts/openai-openapi-extract.mjs <openapi.json> <commit> [out]
//
// <openapi.json> is `openapi.json` of github.com/openai/openai-openapi (JSON, so no YAML parser),
// <commit> the commit it was taken from, recorded with the document's version in the fixture.
// Documentation keywords (description, examples, x-oaiMeta) are left out; every other keyword of
// a schema is kept as published, so the test's own adjustments (docs/conformance.md) are the
// only difference from the document.

import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";

/** The schemas of what the gateway answers on its OpenAI-style routes. */
const roots = [
  "CreateChatCompletionResponse",
  "CreateChatCompletionStreamResponse",
  "Response",
  "ResponseStreamEvent",
  "CreateEmbeddingResponse",
  "ImagesResponse",
  "CreateTranscriptionResponseJson",
  "CreateTranscriptionResponseVerboseJson",
  "ListModelsResponse",
  "Model",
  "ErrorResponse",
];

const documentationKeys = new Set(["description", "example", "examples", "x-oaiMeta"]);

const [source, commit, out = "test/fixtures/openai-openapi/schemas.json"] = process.argv.slice(2);
if (!source || !/^[0-9a-f]{40}$/.test(commit ?? "")) {
  console.error("usage: node scripts/openai-openapi-extract.mjs <openapi.json> <commit> [out]");
  process.exit(2);
}
const document = JSON.parse(readFileSync(source, "utf8"));
const all = document.components.schemas;

/** A schema without its documentation; the keys of `properties` are names, not keywords. */
function strip(schema) {
  if (Array.isArray(schema)) return schema.map(strip);
  if (!schema || typeof schema !== "object") return schema;
  const kept = {};
  for (const [key, value] of Object.entries(schema)) {
    if (documentationKeys.has(key)) continue;
    if (key === "properties" || key === "patternProperties") {
      kept[key] = Object.fromEntries(Object.entries(value).map(([n, s]) => [n, strip(s)]));
    } else if (key === "enum" || key === "const" || key === "default" || key === "required") {
      kept[key] = value;
    } else {
      kept[key] = strip(value);
    }
  }
  return kept;
}

function references(value, found) {
  if (Array.isArray(value)) for (const item of value) references(item, found);
  else if (value && typeof value === "object") {
    for (const [key, inner] of Object.entries(value)) {
      if (key === "$ref" && typeof inner === "string") found.add(inner.split("/").at(-1));
      else references(inner, found);
    }
  }
}

const schemas = {};
const pending = [...roots];
while (pending.length > 0) {
  const name = pending.pop();
  if (name in schemas) continue;
  if (!(name in all)) throw new Error(`the document has no schema ${name}`);
  schemas[name] = strip(all[name]);
  const found = new Set();
  references(schemas[name], found);
  pending.push(...found);
}

const sorted = Object.fromEntries(
  Object.keys(schemas)
    .sort()
    .map((n) => [n, schemas[n]]),
);
const fixture = {
  source: {
    repository: "https://github.com/openai/openai-openapi",
    path: "openapi.json",
    commit,
    openapi: document.openapi,
    version: document.info.version,
  },
  roots,
  components: { schemas: sorted },
};
writeFileSync(out, JSON.stringify(fixture));
// Written as the project's formatter writes JSON, so `npm run lint` passes on the fixture.
execFileSync("npx", ["biome", "format", "--write", out], { stdio: "ignore" });
console.log(
  `${Object.keys(sorted).length} schemas of OpenAI API ${document.info.version} -> ${out}`,
);
