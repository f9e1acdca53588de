// The trace viewer: plain DOM, no build step, nothing loaded from elsewhere.
// It draws only what the recorded events say (GET /traces, GET /traces/{id}, POST /search
// with explain); nothing here knows how routing works.
"use strict";

(function () {
  const ROW = 22;            // px per row in a lane
  const SOURCE_STEP = "source_invoked";

  // --- small helpers ---------------------------------------------------------------

  // Stored text (queries, source answers, messages) comes from whoever asked or answered.
  // A bidi override in it would reorder the rest of its line, a C0/C1 control hide itself:
  // each such character is shown as a visible escape, the set and spelling the CLI uses
  // (search/terminal.py: C0 but tab and newline, DEL, C1, the bidi controls and marks, the
  // line and paragraph separators, and the invisible characters: zero-width space, word
  // joiner, invisible operators, BOM, soft hyphen, grapheme joiner, blank letters, the
  // variation selectors but U+FE0E/U+FE0F, tag characters).
  const UNSAFE = /[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\u2800\u3164\ufe00-\ufe0d\ufeff\uffa0\u{e0000}-\u{e007f}\u{e0100}-\u{e01ef}]/u;
  const UNSAFE_ALL = new RegExp(UNSAFE.source, "gu");

  function escapeChar(char) {
    const code = char.codePointAt(0);
    if (code <= 0xff) return "\\x" + code.toString(16).padStart(2, "0");
    return code <= 0xffff ? "\\u" + code.toString(16).padStart(4, "0")
                          : "\\U" + code.toString(16).padStart(8, "0");
  }

  // The text as a string with every such character escaped (for attributes: a title).
  function escapedString(text) {
    return String(text).replace(UNSAFE_ALL, escapeChar);
  }

  // The text as nodes: plain text, each escape in a muted span of its own.
  function escaped(text) {
    const value = String(text);
    if (!UNSAFE.test(value)) return document.createTextNode(value);
    const nodes = document.createDocumentFragment();
    let last = 0;
    for (const match of value.matchAll(UNSAFE_ALL)) {
      if (match.index > last) nodes.append(value.slice(last, match.index));
      nodes.append(el("span", { class: "esc" }, document.createTextNode(escapeChar(match[0]))));
      last = match.index + match[0].length;
    }
    if (last < value.length) nodes.append(value.slice(last));
    return nodes;
  }

  // Every text a node is given goes through `escaped`: `text`, string children, title.
  function setText(node, text) {
    node.replaceChildren(escaped(text));
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") setText(node, value);
      else if (key === "title") node.setAttribute(key, escapedString(value));
      else if (key.startsWith("data-") || key.startsWith("aria-") || key === "href" || key === "role" ||
               key === "type" || key === "colspan") node.setAttribute(key, String(value));
      else node[key] = value;
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : escaped(child));
    }
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    return node;
  }

  function fmtMs(value) {
    if (typeof value !== "number") return "";
    return value < 10 ? value.toFixed(2) : value < 100 ? value.toFixed(1) : value.toFixed(0);
  }

  function fmtValue(value) {
    if (typeof value === "string") return value;
    if (typeof value === "number") return Number.isInteger(value) ? String(value) : String(+value.toFixed(3));
    return JSON.stringify(value);
  }

  function partKey(path) {
    return path === "" ? [] : path.split(".").map((p) => parseInt(p, 10) || 0);
  }

  function comparePaths(a, b) {
    const ka = partKey(a), kb = partKey(b);
    for (let i = 0; i < Math.min(ka.length, kb.length); i++) {
      if (ka[i] !== kb[i]) return ka[i] - kb[i];
    }
    return ka.length - kb.length;
  }

  function parentPath(path) {
    const i = path.lastIndexOf(".");
    return i < 0 ? "" : path.slice(0, i);
  }

  function markerKind(step) {
    if (step === "result_cache_hit" || step === "intent_cached") return "cache";
    if (step.startsWith("intent_")) return "decision";
    if (step === "error") return "error";
    if (step === "source_skipped") return "skip";
    if (step === "fallback") return "fallback";
    if (step === "control_withheld") return "withheld";
    return "event";
  }

  // The server's bearer token (server.api_token), when it has one: asked for on a 401,
  // kept for this browser tab only (sessionStorage), sent only to this server.
  const TOKEN_KEY = "search-router.api-token";
  const tokenForm = document.getElementById("token-form");

  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (err) { return ""; }
  }

  function askForToken() {
    tokenForm.hidden = false;
    document.getElementById("token-forget").hidden = !token();
    document.getElementById("api-token").focus();
  }

  async function api(path, options) {
    const headers = { "Accept": "application/json" };
    if (token()) headers["Authorization"] = `Bearer ${token()}`;
    const request = Object.assign({}, options || {});
    request.headers = Object.assign(headers, (options && options.headers) || {});
    let response;
    try {
      response = await fetch(path, request);
    } catch (err) {
      throw new Error("the server could not be reached");
    }
    let body = null;
    try { body = await response.json(); } catch (err) { body = null; }
    if (response.status === 401) askForToken();
    return { status: response.status, body: body };
  }

  function errorText(result) {
    if (result.status === 401) {
      return token() ? "the API token was not accepted: enter it again above"
                     : "this server needs its API token: enter it above";
    }
    const error = result.body && result.body.error;
    return error ? `${error.type}: ${error.message}` : `HTTP ${result.status}`;
  }

  // --- tooltip ---------------------------------------------------------------------

  const tooltip = document.getElementById("tooltip");

  function showTooltip(event, fields) {
    tooltip.replaceChildren();
    const table = el("table");
    for (const [key, value] of Object.entries(fields)) {
      table.append(el("tr", {}, el("th", { text: key }), el("td", { text: fmtValue(value) })));
    }
    tooltip.append(table);
    tooltip.hidden = false;
    moveTooltip(event);
  }

  function moveTooltip(event) {
    const pad = 14;
    const width = tooltip.offsetWidth, height = tooltip.offsetHeight;
    let x = event.clientX + pad, y = event.clientY + pad;
    if (x + width > window.innerWidth) x = Math.max(0, event.clientX - width - pad);
    if (y + height > window.innerHeight) y = Math.max(0, event.clientY - height - pad);
    tooltip.style.left = x + "px";
    tooltip.style.top = y + "px";
  }

  function hideTooltip() {
    tooltip.hidden = true;
    tooltip.replaceChildren();
  }

  function hoverable(node, fields) {
    node.addEventListener("mouseenter", (e) => showTooltip(e, fields));
    node.addEventListener("mousemove", moveTooltip);
    node.addEventListener("mouseleave", hideTooltip);
    return node;
  }

  // Text cut to `limit` characters at a word boundary, never inside a word.
  function clip(text, limit) {
    const value = String(text || "");
    if (value.length <= limit) return value;
    let cut = value.slice(0, limit);
    const space = cut.search(/\s\S*$/);
    if (space > limit * 0.5) cut = cut.slice(0, space);
    return cut.replace(/[\s,.;:!?-]+$/, "") + "…";
  }

  // The few words a step chip shows; the tooltip has every field.
  function stepText(event) {
    const step = event.step;
    if (step.startsWith("intent_")) {
      return `${step.slice("intent_".length)} → ${event.decision || (event.matched === false ? "no match" : "none")}`;
    }
    if (step === "source_skipped") return `skipped ${event.source}`;
    if (step === "fallback") return `fallback ${event.from_source} → ${event.to_source}`;
    if (step === "result_cache_hit") return `cache ${event.source}`;
    if (step === "decomposed") return `split in ${(event.parts || []).length}`;
    if (step === "conditional_detected") return event.negated ? "unless…" : "if…";
    if (step === "control_withheld") return `withheld ${event.source}`;
    if (step === "snapshot_answered") return `${event.source} for ${event.live_route}: may be old`;
    if (step === "error") return `error ${event.error_type || ""}`.trim();
    return step;
  }

  // --- the waterfall ---------------------------------------------------------------

  function buildLanes(chain) {
    const lanes = new Map();
    const lane = (path) => {
      if (!lanes.has(path)) lanes.set(path, { path: path, events: [], calls: [], query: null });
      return lanes.get(path);
    };
    lane("");
    for (const event of chain) {
      let path = String(event.part || "");
      const own = lane(path);
      own.events.push(event);
      if (event.step === SOURCE_STEP) own.calls.push(event);
      if (own.query === null && path !== "" && typeof event.query === "string") own.query = event.query;
      while (path !== "") { path = parentPath(path); lane(path); }
    }
    return [...lanes.values()].sort((a, b) => comparePaths(a.path, b.path));
  }

  function renderWaterfall(chain, durationMs) {
    const lastT = chain.reduce((m, e) => Math.max(m, typeof e.t_ms === "number" ? e.t_ms : 0), 0);
    const total = Math.max(durationMs || 0, lastT) || 1;
    const pct = (ms) => Math.min(100, Math.max(0, (ms / total) * 100));
    const root = el("div", { class: "waterfall", "data-total-ms": total.toFixed(3) });

    const axis = el("div", { class: "axis" }, el("div", { class: "lane-label" }),
      el("div", { class: "steps-head", text: "steps, in order" }));
    const ticks = el("div", { class: "ticks" });
    for (const f of [0, 0.25, 0.5, 0.75, 1]) {
      const tick = el("span", { class: "tick", text: fmtMs(total * f) + " ms" });
      tick.style.left = f * 100 + "%";
      ticks.append(tick);
    }
    axis.append(ticks);
    root.append(axis);

    for (const lane of buildLanes(chain)) {
      const label = lane.path === "" ? "request" : `part ${lane.path}`;
      const laneNode = el("div", { class: "lane", "data-part": lane.path },
        el("div", { class: "lane-label", title: lane.query || "" },
          el("strong", { text: label }), lane.query ? el("span", { class: "q", text: lane.query }) : null));
      const steps = el("div", { class: "steps" });
      const track = el("div", { class: "track" });
      const rows = 1 + lane.calls.length;
      track.style.height = rows * ROW + "px";

      // Instantaneous events (decisions, skips, fallbacks, cache hits...) land within
      // microseconds of each other: on the time axis they would pile up. Each gets a chip
      // of its own in the steps column, in seq order, and a thin mark at its time on row 0.
      for (const event of lane.events) {
        if (event.step === SOURCE_STEP) continue;
        const kind = markerKind(event.step);
        const chip = el("span", {
          class: `marker kind-${kind}`, "data-step": event.step, "data-seq": event.seq,
          "data-kind": kind, "data-source": event.source || event.decision || event.to_source || null,
          tabIndex: 0,
        }, el("i", { class: "dot" }), stepText(event));
        steps.append(hoverable(chip, event));
        const instant = el("div", {
          class: `instant kind-${kind}`, "data-step": event.step, "data-seq": event.seq,
          "data-t-ms": event.t_ms,
        });
        instant.style.left = pct(event.t_ms) + "%";
        track.append(instant);
        chip.addEventListener("mouseenter", () => instant.classList.add("lit"));
        chip.addEventListener("mouseleave", () => instant.classList.remove("lit"));
      }

      // One row per source call, its bar from (t_ms - elapsed_ms) to t_ms.
      const bars = [];
      lane.calls.forEach((event, i) => {
        const start = Math.max(0, event.t_ms - (event.elapsed_ms || 0));
        const bar = el("div", {
          class: `bar outcome-${event.outcome}`, "data-step": SOURCE_STEP, "data-seq": event.seq,
          "data-source": event.source, "data-outcome": event.outcome,
          "data-elapsed-ms": event.elapsed_ms, "data-start-ms": start.toFixed(3),
        }, el("span", { class: "bar-label", text: `${event.source} ${fmtMs(event.elapsed_ms)} ms` }));
        bar.style.left = pct(start) + "%";
        bar.style.width = (pct(event.t_ms) - pct(start)) + "%";
        // The label goes inside a wide bar, left of a bar that ends near the right edge.
        if (pct(event.t_ms) - pct(start) > 12) bar.classList.add("label-inside");
        else if (pct(event.t_ms) > 85) bar.classList.add("label-left");
        bar.style.top = (i + 1) * ROW + 3 + "px";
        track.append(hoverable(bar, event));
        bars.push({ event: event, row: i + 1, start: start });
      });

      // Fallbacks: an arrow from where the failed source ended down to the next one's bar.
      const fallbacks = lane.events.filter((e) => e.step === "fallback");
      if (fallbacks.length) {
        const layer = svg("svg", { class: "arrows", width: "100%", height: rows * ROW });
        for (const event of fallbacks) {
          const from = bars.filter((b) => b.event.source === event.from_source && b.event.seq < event.seq).pop();
          const to = bars.find((b) => b.event.source === event.to_source && b.event.seq > event.seq);
          // No bar for the next source: it answered from the cache or was skipped (a marker).
          const mark = to ? null : lane.events.find((e) => e.source === event.to_source &&
            e.seq > event.seq && (e.step === "result_cache_hit" || e.step === "source_skipped"));
          const x1 = from ? pct(from.event.t_ms) : pct(event.t_ms);
          const x2 = to ? pct(to.start) : pct(mark ? mark.t_ms : event.t_ms);
          const y1 = from ? from.row * ROW + ROW / 2 : ROW / 2;
          const y2 = to ? to.row * ROW + 3 : mark ? ROW - 4 : (from ? from.row + 1 : 1) * ROW;
          const group = svg("g", {
            class: "fallback-arrow", "data-step": "fallback", "data-seq": event.seq,
            "data-from": event.from_source, "data-to": event.to_source, "data-reason": event.reason,
          });
          group.append(svg("line", { class: "hit", x1: x1 + "%", y1: y1, x2: x2 + "%", y2: y2 }));
          group.append(svg("line", {
            class: "shaft", x1: x1 + "%", y1: y1, x2: x2 + "%", y2: y2, "marker-end": "url(#fallback-head)",
          }));
          layer.append(hoverable(group, event));
        }
        track.append(layer);
      }
      laneNode.append(steps, track);
      root.append(laneNode);
    }

    const legend = el("p", { class: "legend" },
      el("span", { class: "swatch outcome-ok" }), "ok ",
      el("span", { class: "swatch outcome-empty" }), "empty ",
      el("span", { class: "swatch outcome-error" }), "error ",
      el("span", { class: "swatch outcome-timeout" }), "timeout ",
      el("span", { class: "marker-swatch kind-decision" }), "decision ",
      el("span", { class: "marker-swatch kind-skip" }), "skipped ",
      el("span", { class: "marker-swatch kind-fallback" }), "fallback ",
      el("span", { class: "marker-swatch kind-cache" }), "cache hit ",
      el("span", { class: "marker-swatch kind-withheld" }), "withheld ",
      el("span", { class: "marker-swatch kind-error" }), "error ",
      el("span", { class: "marker-swatch kind-event" }), "other step ",
      "· ↓ fallback arrow · hover a step or bar for its fields");
    root.append(legend);
    return root;
  }

  function renderEvents(chain) {
    const table = el("table", { class: "grid events" });
    table.append(el("thead", {}, el("tr", {},
      el("th", { text: "seq" }), el("th", { text: "t ms" }), el("th", { text: "part" }),
      el("th", { text: "step" }), el("th", { text: "fields" }))));
    const body = el("tbody");
    for (const event of chain) {
      const fields = el("td", { class: "fields" });
      for (const [key, value] of Object.entries(event)) {
        if (["step", "seq", "t_ms", "part"].includes(key)) continue;
        fields.append(el("span", { class: "field" }, el("b", { text: key + "=" }), fmtValue(value)));
      }
      body.append(el("tr", { "data-step": event.step, "data-seq": event.seq },
        el("td", { text: event.seq }), el("td", { class: "num", text: fmtMs(event.t_ms) }),
        el("td", { text: event.part === "" ? "—" : event.part }),
        el("td", { class: `step kind-${markerKind(event.step)}`, text: event.step }), fields));
    }
    table.append(body);
    return table;
  }

  // What a part's status says, in words: unserved and withheld parts called no source
  // (or changed nothing), which "→ no source" alone would hide.
  function statusWords(result) {
    if (result.status === "unserved") return { target: "no source serves this", detail: " unserved" };
    if (result.status === "withheld") {
      const why = result.withheld ? (result.withheld.reasons || [result.withheld.reason]).join(", ") : "";
      return { target: result.source || result.route || "no source",
               detail: ` withheld: not carried out${why ? " (" + why + ")" : ""}; nothing was changed` };
    }
    if (result.status === "planned") {
      // The plan says which of its sources are out now (disabled, circuit open).
      const plan = result.plan || {};
      const out = Object.entries(plan.unavailable || {});
      const up = (plan.sources || []).filter((s) => !(s in (plan.unavailable || {})));
      let meets = "";
      if (out.length) {
        const said = out.map(([name, why]) => `${name} ${why === "disabled" ? "is disabled" : why === "circuit_open" ? "has its circuit open" : "is out (" + why + ")"}`).join(", ");
        meets = up.length ? `; ${said}: ${up[0]} would answer` : `; ${said}, and nothing stands in: it would fail`;
      }
      return { target: result.source || result.route || "no source", detail: ` planned (dry run)${meets}` };
    }
    // A snapshot answered a question meant for the live source (snapshot_answered).
    const old = result.may_be_out_of_date === true ? ", may be out of date" : "";
    return { target: result.source || "no source", detail: ` ${result.status}${old}` };
  }

  // Whether each conditional result's condition was an "unless", as its
  // conditional_detected event recorded it (`negated`). A result carries no part path: it
  // is matched to the event with its condition and consequence, in part order. null where
  // the chain does not say (the event was dropped past routing.max_events, or no chain).
  function conditionWords(results, chain) {
    const detected = (chain || []).filter((e) => e.step === "conditional_detected")
      .sort((a, b) => comparePaths(String(a.part || ""), String(b.part || "")) || a.seq - b.seq);
    const used = new Set();
    return (results || []).map((result) => {
      const condition = result.condition;
      if (!condition) return null;
      const event = detected.find((e) => !used.has(e) && e.condition === condition.query &&
        (typeof e.consequence !== "string" || e.consequence === result.query));
      if (event) {
        used.add(event);
        return event.negated ? "unless" : "if";
      }
      if (typeof condition.negated === "boolean") return condition.negated ? "unless" : "if";
      return null;
    });
  }

  function renderResults(results, chain) {
    const list = el("ul", { class: "results" });
    const add = (result, prefix, kind) => {
      const count = Array.isArray(result.items) ? result.items.length : result.item_count;
      const words = statusWords(result);
      const quiet = result.status === "unserved" || result.status === "withheld";
      const item = el("li", { class: `result status-${result.status}`, "data-source": result.source,
                              "data-status": result.status, "data-condition": kind },
        prefix ? el("span", { class: "cond-word", text: prefix.text, title: prefix.title }) : null,
        el("span", { class: "q", text: result.query }), " → ",
        el("strong", { text: words.target }),
        el("span", { class: "status-word", text: words.detail }),
        !quiet && count !== undefined ? ` · ${count} item${count === 1 ? "" : "s"}` : "",
        result.error ? el("span", { class: "err", text: ` (${result.error.type}: ${result.error.message})` }) : null);
      if (Array.isArray(result.items) && result.items.length && result.status !== "withheld") {
        const items = el("ol", { class: "items" });
        for (const it of result.items.slice(0, 5)) {
          items.append(el("li", {}, el("b", { text: it.title || "" }), " ",
            el("span", { class: "item-text", text: clip(it.text, 200) })));
        }
        item.append(items);
      }
      list.append(item);
    };
    const words = conditionWords(results, chain);
    (results || []).forEach((result, i) => {
      if (result.condition) {
        const word = words[i];
        add(result.condition, word
          ? { text: word + " " }
          : { text: "if/unless ", title: "the chain does not say which: its conditional_detected event was not recorded" },
          word || "unknown");
      }
      add(result, null, null);
    });
    return list;
  }

  // --- labels: a user's correction of a part's decision ------------------------------

  const INTENT_STEPS = ["intent_keyword", "intent_cached", "intent_semantic", "intent_llm",
                        "intent_default", "intent_session", "intent_world"];

  // Each routed part and its decision, read off the chain as the server does: the last
  // intent event of the part that decided (a semantic miss decides nothing).
  function routedParts(chain) {
    const parts = new Map();
    for (const event of chain) {
      if (!INTENT_STEPS.includes(event.step) || typeof event.query !== "string") continue;
      if (event.step === "intent_semantic" && event.matched === false) continue;
      parts.set(String(event.part || ""), { part: String(event.part || ""), query: event.query,
                                            decision: event.decision || "none", step: event.step });
    }
    return [...parts.values()].sort((a, b) => comparePaths(a.part, b.part));
  }

  function renderLabels(trace) {
    const section = el("div", { class: "labels" });
    const parts = routedParts(trace.chain || []);
    const routes = trace.label_routes || [];
    if (!parts.length) return section;
    const table = el("table", { class: "grid label-table" });
    table.append(el("thead", {}, el("tr", {},
      el("th", { text: "part" }), el("th", { text: "query" }), el("th", { text: "decision" }),
      el("th", { text: "label" }), el("th", { text: "correct it" }))));
    const body = el("tbody");
    for (const part of parts) {
      const mine = (trace.labels || []).filter((l) => String(l.part) === part.part);
      const latest = mine.length ? mine[mine.length - 1] : null;
      const select = el("select", { class: "label-route", "aria-label": `route for part ${part.part}` });
      for (const name of routes) {
        select.append(el("option", { value: name, text: name === "none" ? "none (no source serves this)" : name }));
      }
      select.value = latest ? latest.route : part.decision;
      const status = el("span", { class: "label-status", "aria-live": "polite" });
      const button = el("button", { type: "button", class: "label-save", text: "Label" });
      button.addEventListener("click", async () => {
        button.disabled = true;
        status.textContent = "saving…";
        status.classList.remove("error");
        const result = await api(`traces/${encodeURIComponent(trace.trace_id)}/labels`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ part: part.part, route: select.value }),
        });
        button.disabled = false;
        if (result.status !== 201) {
          setText(status, errorText(result));
          status.classList.add("error");
          return;
        }
        loadTrace(trace.trace_id);
      });
      body.append(el("tr", { "data-part": part.part, "data-decision": part.decision,
                             "data-label": latest ? latest.route : null },
        el("td", { text: part.part }), el("td", { class: "q", text: part.query }),
        el("td", {}, el("strong", { text: part.decision }), el("span", { class: "muted", text: ` ${part.step}` })),
        el("td", { class: "label-current" }, latest
          ? el("span", { class: "label-badge", text: `labelled ${latest.route}` + (mine.length > 1 ? ` (latest of ${mine.length})` : "") })
          : el("span", { class: "muted", text: "—" })),
        el("td", {}, select, " ", button, " ", status)));
    }
    table.append(body);
    section.append(el("h2", { text: "Labels" }),
      el("p", { class: "muted", text: "Say which route a part should have had; `search fit` learns from the labels." }),
      table);
    return section;
  }

  function renderChain(container, chain, durationMs, narrative) {
    container.append(el("h2", { text: "Waterfall" }), renderWaterfall(chain, durationMs));
    if (narrative && narrative.length) {
      const list = el("ol", { class: "narrative" });
      for (const line of narrative) list.append(el("li", { text: line }));
      container.append(el("h2", { text: "Diagnosis" }), list);
    }
    container.append(el("h2", { text: `Events (${chain.length})` }), renderEvents(chain));
  }

  // --- views -----------------------------------------------------------------------

  const views = ["traces", "trace", "search"];
  let nextCursor = null;
  let listQuery = "";

  function show(name) {
    for (const v of views) document.getElementById(`view-${v}`).hidden = v !== name;
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", a.dataset.nav === name || (name === "trace" && a.dataset.nav === "traces"));
    }
  }

  function filtersFromForm() {
    const params = new URLSearchParams();
    for (const [key, value] of new FormData(document.getElementById("filters"))) {
      if (String(value).trim() !== "") params.set(key, String(value).trim());
    }
    return params;
  }

  function formFromFilters(params) {
    const form = document.getElementById("filters");
    for (const input of form.elements) {
      if (!input.name) continue;
      if (input.type === "checkbox") input.checked = params.get(input.name) === "true";
      else input.value = params.get(input.name) || "";
    }
  }

  // Each part as "route status" (a part no route took: "— unserved"), so a request that
  // was not served reads so in the list, not as an empty sources cell.
  function partsText(parts) {
    return (parts || []).map((p) => `${p.route || "—"} ${p.status}`).join(" · ");
  }

  function traceRow(t) {
    const flags = [];
    if (t.failed) flags.push("failed");
    if (t.fallback) flags.push("fallback");
    if (t.cached) flags.push("cached");
    if (t.dry_run) flags.push("dry run");
    if (t.replay_of) flags.push("replay");
    const link = el("a", { href: `#/trace/${encodeURIComponent(t.trace_id)}`, text: t.query });
    const row = el("tr", { class: t.failed ? "failed" : "", "data-trace-id": t.trace_id },
      el("td", { class: "time", text: new Date(t.started_at * 1000).toLocaleString() }),
      el("td", { class: "query" }, link),
      el("td", { text: t.status_code }), el("td", { class: "num", text: fmtMs(t.duration_ms) }),
      el("td", { text: (t.sources || []).join(", ") }),
      el("td", { class: "parts", text: partsText(t.parts) }),
      el("td", { class: "flags", text: flags.join(" · ") }));
    row.addEventListener("click", (e) => {
      if (e.target.tagName !== "A") location.hash = `#/trace/${encodeURIComponent(t.trace_id)}`;
    });
    return row;
  }

  async function loadList(params, append) {
    const status = document.getElementById("list-status");
    const body = document.querySelector("#trace-list tbody");
    const query = new URLSearchParams(params);
    query.set("limit", "50");
    // The cursor says where the next page starts; an offset beside it is refused (422).
    if (append && nextCursor) {
      query.delete("offset");
      query.set("cursor", nextCursor);
    }
    status.textContent = "loading…";
    const result = await api(`traces?${query}`);
    if (result.status !== 200) {
      setText(status, errorText(result));
      status.classList.add("error");
      if (!append) body.replaceChildren();
      document.getElementById("more").hidden = true;
      return;
    }
    status.classList.remove("error");
    const page = result.body;
    if (!append) body.replaceChildren();
    for (const t of page.traces) body.append(traceRow(t));
    nextCursor = page.next_cursor;
    document.getElementById("more").hidden = !nextCursor;
    const shown = body.children.length;
    status.textContent = page.total === 0 ? "no traces match" : `${shown} of ${page.total} traces`;
  }

  function traceProblem(text) {
    document.getElementById("trace-body").replaceChildren();
    document.getElementById("trace-head").replaceChildren(el("p", { class: "status error", text: text }));
  }

  async function loadTrace(traceId) {
    const head = document.getElementById("trace-head");
    const body = document.getElementById("trace-body");
    hideTooltip();
    if (!traceId) {
      traceProblem("no trace id in this link: it should read #/trace/ and the trace's id");
      return;
    }
    head.replaceChildren(el("p", { class: "status", text: "loading…" }));
    body.replaceChildren();
    const result = await api(`traces/${encodeURIComponent(traceId)}`);
    if (result.status !== 200) {
      traceProblem(errorText(result));
      return;
    }
    const t = result.body;
    if (!t || typeof t !== "object" || !Array.isArray(t.chain) || !Array.isArray(t.results)) {
      traceProblem(`trace ${traceId}: the server's answer is not a trace`);
      return;
    }
    const flags = [t.failed && "failed", t.fallback && "fallback", t.cached && "cached",
                   t.dry_run && "dry run", t.redacted && "redacted"].filter(Boolean);
    head.replaceChildren(
      el("h2", { class: "query", text: t.query }),
      el("p", { class: "meta" },
        `${new Date(t.started_at * 1000).toLocaleString()} · status ${t.status_code} · ${fmtMs(t.duration_ms)} ms`,
        flags.length ? ` · ${flags.join(" · ")}` : "",
        t.dropped_events ? ` · ${t.dropped_events} events dropped` : "",
        " · ", el("code", { text: t.trace_id })),
      t.error ? el("p", { class: "status error", text: `${t.error.type}: ${t.error.message}` }) : "",
      renderResults(t.results, t.chain));
    body.append(renderLabels(t));
    renderChain(body, t.chain, t.duration_ms, t.narrative);
  }

  async function runSearch(event) {
    event.preventDefault();
    const status = document.getElementById("search-status");
    const out = document.getElementById("search-result");
    const query = document.getElementById("query").value;
    const dryRun = document.getElementById("dry-run").checked;
    setText(status, "searching…");
    status.classList.remove("error");
    out.replaceChildren();
    const started = performance.now();
    const result = await api("search", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify({ query: query, explain: true, dry_run: dryRun }),
    });
    const took = performance.now() - started;
    const body = result.body || {};
    if (result.status !== 200) {
      setText(status, errorText(result));
      status.classList.add("error");
    } else {
      const flags = [body.fallback_occurred && "fallback", body.cached && "cached"].filter(Boolean);
      // As the trace page says it: events past routing.max_events were not recorded.
      if (body.dropped_events) flags.push(`${body.dropped_events} events dropped (routing.max_events)`);
      setText(status, `${body.results.length} part${body.results.length === 1 ? "" : "s"} in ${fmtMs(took)} ms` +
        (flags.length ? ` · ${flags.join(" · ")}` : ""));
    }
    if (body.trace_id) {
      const where = el("p", { class: "trace-where" }, el("code", { text: body.trace_id }));
      out.append(where);
      offerStoredTrace(where, body.trace_id);
    }
    if (body.results) out.append(renderResults(body.results, body.explanation));
    if (Array.isArray(body.explanation)) renderChain(out, body.explanation, null, null);
  }

  // The link to the stored trace only once the store has it: with trace.enabled off
  // (or a trace it did not keep) GET /traces/{id} is a 404, and a link there would lead
  // to nothing. A HEAD asks without the body; only a refusal is fetched, for its reason.
  async function offerStoredTrace(where, traceId) {
    const path = `traces/${encodeURIComponent(traceId)}`;
    let found = await api(path, { method: "HEAD" });
    if (found.status !== 200 && found.status !== 401) found = await api(path);
    if (!where.isConnected) return;
    if (found.status === 200) {
      where.prepend(el("a", { href: `#/trace/${encodeURIComponent(traceId)}`, class: "trace-link",
                              text: "open the stored trace" }), " ");
    } else {
      where.append(el("span", { class: "muted trace-unstored", text: ` · not stored: ${errorText(found)}` }));
    }
  }

  function route() {
    hideTooltip();  // what it described is about to be replaced
    const hash = location.hash || "#/traces";
    const [path, query] = hash.slice(1).split("?");
    if (path.startsWith("/trace/")) {
      show("trace");
      let traceId;
      try {
        traceId = decodeURIComponent(path.slice("/trace/".length));
      } catch (err) {
        traceProblem("this trace link is malformed: its id is not valid percent-encoding");
        return;
      }
      loadTrace(traceId);
    } else if (path === "/search") {
      show("search");
      document.getElementById("query").focus();
    } else {
      show("traces");
      const params = new URLSearchParams(query || "");
      formFromFilters(params);
      listQuery = params.toString();
      loadList(params, false);
    }
  }

  document.getElementById("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    const params = filtersFromForm();
    const target = "#/traces" + (params.toString() ? "?" + params : "");
    if (location.hash === target) route(); else location.hash = target;
  });
  document.getElementById("filters-reset").addEventListener("click", () => {
    setTimeout(() => { location.hash = "#/traces"; }, 0);
  });
  document.getElementById("more").addEventListener("click", () => loadList(new URLSearchParams(listQuery), true));
  document.getElementById("search-form").addEventListener("submit", runSearch);
  tokenForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = document.getElementById("api-token").value.trim();
    try { sessionStorage.setItem(TOKEN_KEY, value); } catch (err) { /* private mode */ }
    document.getElementById("api-token").value = "";
    tokenForm.hidden = true;
    route();
  });
  document.getElementById("token-forget").addEventListener("click", () => {
    try { sessionStorage.removeItem(TOKEN_KEY); } catch (err) { /* private mode */ }
    tokenForm.hidden = true;
  });
  window.addEventListener("hashchange", route);
  route();
})();
