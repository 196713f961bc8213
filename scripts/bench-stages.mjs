// `--stages`: the time between the steps of one request through the gateway, from diagnostics
// channels (Node's HTTP server, the gateway's own stages and its upstream client's steps). Medians per step, so
// "where the time goes" comes from the benchmark itself rather than from a patched build.
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { performance } from "node:perf_hooks";
import * as gateway from "../dist/index.js";

// Read from the namespace: `bench-ab.sh` runs these scripts against a base build that may not
// export the upstream channel yet (its stages then lack the upstream's steps).
const { stageChannelName, upstreamChannelName = "model-gateway:upstream" } = gateway;

/** Collects the steps of requests the gateway on `port` serves (one connection at a time). */
export function collectStages(port) {
  const open = new Map();
  const done = [];
  let upstream; // the one request waiting on the upstream (sequential at one connection)
  const mark = (record, name) => {
    if (record) record.push([name, performance.now()]);
  };
  const handlers = {
    "http.server.request.start": ({ request }) => {
      if (request.socket?.localPort !== port) return;
      const record = [["received", performance.now()]];
      open.set(request, record);
    },
    [stageChannelName]: ({ stage, request }) => {
      const record = open.get(request);
      mark(record, stage);
      if (stage === "admitted") upstream = record;
    },
    [upstreamChannelName]: ({ step }) => {
      if (step === "sent") mark(upstream, "upstream request written");
      else if (step === "headers") mark(upstream, "upstream headers read");
      // A stream's first body chunk: from it to the gateway's first write is the first token's way.
      else if (step === "chunk") {
        if (upstream && !upstream.some(([name]) => name === "upstream first chunk read"))
          mark(upstream, "upstream first chunk read");
      } else {
        mark(upstream, "upstream body read");
        upstream = undefined;
      }
    },
    "http.server.response.finish": ({ request }) => {
      const record = open.get(request);
      if (!record) return;
      open.delete(request);
      mark(record, "response finished");
      done.push(record);
    },
  };
  for (const [name, handler] of Object.entries(handlers)) subscribe(name, handler);
  return {
    /** Median microseconds per step, for steps seen in most requests. */
    stop() {
      for (const [name, handler] of Object.entries(handlers)) unsubscribe(name, handler);
      const steps = new Map();
      for (const record of done) {
        for (let i = 1; i < record.length; i++) {
          const key = `${record[i - 1][0]} -> ${record[i][0]}`;
          if (!steps.has(key)) steps.set(key, []);
          steps.get(key).push((record[i][1] - record[i - 1][1]) * 1000);
        }
      }
      return [...steps]
        .filter(([, times]) => times.length > done.length / 2)
        .map(([step, times]) => {
          times.sort((a, b) => a - b);
          return { step, p50: times[times.length >> 1] };
        });
    },
  };
}
