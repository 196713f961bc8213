"use strict";
/**
 * CommonJS entry: the package is ESM, and `require()` of ESM needs Node >= 20.19 (or a flag).
 * Every entry point of the gateway is asynchronous anyway, so this loads the ESM build with a
 * dynamic import and forwards to it; `load()` gives the whole module (ConfigError and the rest).
 */
let loaded;
function load() {
  loaded ??= import("../dist/index.js");
  return loaded;
}

async function startGateway(options) {
  return (await load()).startGateway(options);
}

module.exports = { startGateway, load };
