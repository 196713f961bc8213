// The gateway's own per-event stream work alone, with no socket: the bench upstream's paced chat
// stream (scripts/bench-upstream.mjs's chunks) passed through the relay a chat client on an
// openai wire gets (SSE parse, the meter's count, the model swap, the pieces for the pump), in a
// loop. Prints CPU µs an event; under callgrind, the instructions of `streams` streams after the
// warm-up, alone (load-independent, so two builds compare):
//
//   npm run build && node scripts/bench-relay-loop.mjs [warm-up streams]
//   BENCH_CALLGRIND=1 valgrind -q --tool=callgrind --callgrind-out-file=cg.%p \
//     node scripts/bench-relay-loop.mjs 1000      (then: grep summary cg.<pid>.1, over 200 x 52)
import { execFileSync } from "node:child_process";
import { SSEStream } from "../dist/server/wire/relay.js";
import { passThroughChat } from "../dist/server/wire/to-client.js";
import { StreamMeter } from "../dist/server/wire/usage.js";
import { pacedChunks, pacedEvents } from "./bench-upstream.mjs";

const chunks = pacedChunks.map((text) => Buffer.from(text));
const events = pacedEvents;
const req = { clientModel: "bench-model", body: { stream: true, messages: [] }, style: "chat" };

async function oneStream() {
  let i = 0;
  const body = {
    [Symbol.asyncIterator]: () => ({
      next: () =>
        Promise.resolve(
          i < chunks.length
            ? { value: chunks[i++], done: false }
            : { value: undefined, done: true },
        ),
      return: () => Promise.resolve({ value: undefined, done: true }),
    }),
  };
  const { pieces } = passThroughChat(req, new SSEStream(body), new StreamMeter(() => 10));
  for (let r = await pieces.next(); !r.done; r = await pieces.next());
}

const warmUp = Number(process.argv[2] ?? 5000);
const measured = 200;
for (let j = 0; j < warmUp; j++) await oneStream();
if (process.env.BENCH_CALLGRIND === "1") {
  execFileSync("callgrind_control", ["-z", String(process.pid)]);
  for (let j = 0; j < measured; j++) await oneStream();
  execFileSync("callgrind_control", ["-d", String(process.pid)]);
} else {
  for (let round = 0; round < 3; round++) {
    const before = process.cpuUsage();
    for (let j = 0; j < warmUp; j++) await oneStream();
    const cpu = process.cpuUsage(before);
    console.log(`${((cpu.user + cpu.system) / (warmUp * events)).toFixed(2)} µs an event`);
  }
}
