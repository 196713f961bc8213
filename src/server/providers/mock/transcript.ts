import type { TranscribeRequest, UpstreamTranscript } from "../provider.js";
import type { MockTranscript } from "./media-answers.js";

interface Segment {
  id: number;
  seek: number;
  start: number;
  end: number;
  text: string;
  tokens: number[];
  temperature: number;
  avg_logprob: number;
  compression_ratio: number;
  no_speech_prob: number;
}

/**
 * The mock's transcript in each of OpenAI's formats; segments are sentences, timed by length, and
 * words are timed by length within their sentence.
 */
export function renderTranscript(
  heard: MockTranscript,
  req: Pick<TranscribeRequest, "format" | "language" | "granularities">,
): UpstreamTranscript {
  const { text, durationSeconds } = heard;
  const seconds = round2(durationSeconds);
  if (req.format === "json") {
    return {
      kind: "json",
      body: { text, usage: { type: "duration", seconds: Math.ceil(seconds) } },
      seconds,
    };
  }
  if (req.format === "text") return { kind: "text", text, seconds };
  const segments = sentenceSegments(text, seconds);
  if (req.format === "verbose_json") {
    const granularities = req.granularities;
    return {
      kind: "json",
      body: {
        task: "transcribe",
        language: req.language ?? "english",
        duration: seconds,
        text,
        ...(granularities.includes("word") ? { words: segments.flatMap(segmentWords) } : {}),
        ...(granularities.length === 0 || granularities.includes("segment") ? { segments } : {}),
        usage: { type: "duration", seconds: Math.ceil(seconds) },
      },
      seconds,
    };
  }
  if (req.format === "srt") {
    const blocks = segments.map(
      (seg, i) =>
        `${i + 1}\n${timestamp(seg.start, ",")} --> ${timestamp(seg.end, ",")}\n${seg.text.trim()}\n`,
    );
    return { kind: "text", text: blocks.join("\n"), seconds };
  }
  const cues = segments.map(
    (seg) => `${timestamp(seg.start, ".")} --> ${timestamp(seg.end, ".")}\n${seg.text.trim()}\n`,
  );
  return { kind: "text", text: `WEBVTT\n\n${cues.join("\n")}`, seconds };
}

function sentenceSegments(text: string, seconds: number): Segment[] {
  const sentences = text.split(/(?<=[.!?])\s+/).filter((part) => part.trim() !== "");
  const total = sentences.reduce((sum, part) => sum + part.length, 0) || 1;
  let start = 0;
  return (sentences.length ? sentences : [text]).map((part, id) => {
    const end =
      id === sentences.length - 1 ? seconds : round2(start + (seconds * part.length) / total);
    const segment: Segment = {
      id,
      seek: 0,
      start,
      end,
      text: ` ${part.trim()}`,
      tokens: [],
      temperature: 0,
      avg_logprob: 0,
      compression_ratio: 1,
      no_speech_prob: 0,
    };
    start = end;
    return segment;
  });
}

/** A segment's words, its time shared among them by length, as OpenAI lists them (no punctuation). */
function segmentWords(segment: Segment): { word: string; start: number; end: number }[] {
  const words = segment.text
    .split(/\s+/)
    .map((word) => word.replace(/^[^\p{L}\p{N}]+|[^\p{L}\p{N}]+$/gu, ""))
    .filter((word) => word !== "");
  const total = words.reduce((sum, word) => sum + word.length, 0) || 1;
  const span = segment.end - segment.start;
  let start = segment.start;
  let done = 0;
  return words.map((word, i) => {
    done += word.length;
    const end =
      i === words.length - 1 ? segment.end : round2(segment.start + (span * done) / total);
    const timed = { word, start, end };
    start = end;
    return timed;
  });
}

function timestamp(seconds: number, separator: "," | "."): string {
  const ms = Math.round(seconds * 1000);
  const pad = (value: number, width = 2) => String(value).padStart(width, "0");
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = Math.floor((ms % 60_000) / 1000);
  return `${pad(h)}:${pad(m)}:${pad(s)}${separator}${pad(ms % 1000, 3)}`;
}

function round2(value: number): number {
  return Math.round(value * 100) / 100;
}
