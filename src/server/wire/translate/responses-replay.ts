import type { ResponsesSSEEvent } from "../responses-types.js";
import { deltaLogprobs, type LogProb } from "./responses.js";
import { asArray, asString, isRecord, type JsonObject } from "./shared.js";

/**
 * A finished Response as the events a stream of it would have sent, numbered from 0: what
 * `GET /v1/responses/{id}?stream=true` replays (the openai SDK's `responses.stream({response_id})`
 * builds the Response from them). Each item opens empty, its text, arguments or summary comes in
 * one delta, and it closes whole; the last event carries the Response as it is.
 */
export function replayedEvents(response: JsonObject): ResponsesSSEEvent[] {
  const events: ResponsesSSEEvent[] = [];
  const emit: Emit = (type, fields) =>
    events.push({ event: type, data: { type, ...fields, sequence_number: events.length } });
  const opened = { ...response, status: "in_progress", output: [], usage: null };
  emit("response.created", { response: opened });
  emit("response.in_progress", { response: opened });
  for (const [index, item] of asArray(response.output).entries())
    if (isRecord(item)) itemEvents(item, index, emit);
  const closing = response.status === "incomplete" ? "response.incomplete" : "response.completed";
  emit(closing, { response });
  return events;
}

type Emit = (type: string, fields: JsonObject) => void;

function itemEvents(item: JsonObject, outputIndex: number, emit: Emit): void {
  const ids = { item_id: item.id, output_index: outputIndex };
  const added = (opened: JsonObject) =>
    emit("response.output_item.added", { output_index: outputIndex, item: opened });
  switch (item.type) {
    case "message": {
      added({ ...item, status: "in_progress", content: [] });
      for (const [contentIndex, part] of asArray(item.content).entries())
        if (isRecord(part)) partEvents(part, { ...ids, content_index: contentIndex }, emit);
      break;
    }
    case "function_call": {
      added({ ...item, status: "in_progress", arguments: "" });
      const args = asString(item.arguments) ?? "";
      if (args) emit("response.function_call_arguments.delta", { ...ids, delta: args });
      emit("response.function_call_arguments.done", { ...ids, name: item.name, arguments: args });
      break;
    }
    case "custom_tool_call": {
      added({ ...item, input: "" });
      const input = asString(item.input) ?? "";
      if (input) emit("response.custom_tool_call_input.delta", { ...ids, delta: input });
      emit("response.custom_tool_call_input.done", { ...ids, input });
      break;
    }
    case "reasoning": {
      const { encrypted_content: _closing, ...opened } = item;
      added({ ...opened, summary: [], ...(item.content === undefined ? {} : { content: [] }) });
      for (const [summaryIndex, part] of asArray(item.summary).entries()) {
        if (!isRecord(part)) continue;
        const at = { ...ids, summary_index: summaryIndex };
        const text = asString(part.text) ?? "";
        emit("response.reasoning_summary_part.added", { ...at, part: { ...part, text: "" } });
        if (text) emit("response.reasoning_summary_text.delta", { ...at, delta: text });
        emit("response.reasoning_summary_text.done", { ...at, text });
        emit("response.reasoning_summary_part.done", { ...at, part });
      }
      for (const [contentIndex, part] of asArray(item.content).entries()) {
        if (!isRecord(part) || part.type !== "reasoning_text") continue;
        const at = { ...ids, content_index: contentIndex };
        const text = asString(part.text) ?? "";
        if (text) emit("response.reasoning_text.delta", { ...at, delta: text });
        emit("response.reasoning_text.done", { ...at, text });
      }
      break;
    }
    default:
      added(item);
  }
  emit("response.output_item.done", { output_index: outputIndex, item });
}

/** A message's content part: added empty, its text (or refusal) in one delta, done whole. */
function partEvents(part: JsonObject, at: JsonObject, emit: Emit): void {
  if (part.type === "output_text") {
    const text = asString(part.text) ?? "";
    const logprobs = deltaLogprobs(asArray(part.logprobs).filter(isRecord) as LogProb[]);
    const annotations = asArray(part.annotations);
    emit("response.content_part.added", {
      ...at,
      part: { type: "output_text", text: "", annotations: [], logprobs: [] },
    });
    if (text) emit("response.output_text.delta", { ...at, delta: text, logprobs });
    for (const [annotationIndex, annotation] of annotations.entries())
      emit("response.output_text.annotation.added", {
        ...at,
        annotation_index: annotationIndex,
        annotation,
      });
    emit("response.output_text.done", { ...at, text, logprobs });
  } else if (part.type === "refusal") {
    const refusal = asString(part.refusal) ?? "";
    emit("response.content_part.added", { ...at, part: { type: "refusal", refusal: "" } });
    if (refusal) emit("response.refusal.delta", { ...at, delta: refusal });
    emit("response.refusal.done", { ...at, refusal });
  } else {
    emit("response.content_part.added", { ...at, part });
  }
  emit("response.content_part.done", { ...at, part });
}
