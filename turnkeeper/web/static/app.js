// turnkeeper web view: relative times, copy buttons and the live host log.
// No build step; htmx does the rest (polling and the controls).
(function () {
  "use strict";

  function relative(when) {
    var seconds = (Date.now() - when.getTime()) / 1000;
    var ahead = seconds < 0;
    seconds = Math.abs(seconds);
    var units = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];
    var text = "0 s";
    for (var i = 0; i < units.length; i++) {
      if (seconds >= units[i][0] || units[i][1] === "s") {
        text = Math.floor(seconds / units[i][0]) + " " + units[i][1];
        break;
      }
    }
    return ahead ? "in " + text : text + " ago";
  }

  function refreshTimes(root) {
    var found = (root || document).querySelectorAll("time[datetime]:not([data-static])");
    for (var i = 0; i < found.length; i++) {
      var when = new Date(found[i].getAttribute("datetime"));
      if (!isNaN(when.getTime())) {
        found[i].textContent = relative(when);
      }
    }
  }

  function copied(button) {
    button.classList.add("copied");
    setTimeout(function () { button.classList.remove("copied"); }, 1200);
  }

  function copy(button) {
    var text = button.getAttribute("data-copy") || "";
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { copied(button); }, function () {
        fallbackCopy(button, text);
      });
    } else {
      fallbackCopy(button, text);
    }
  }

  function fallbackCopy(button, text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); copied(button); } catch (e) { /* nothing to copy into */ }
    document.body.removeChild(area);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button.copy") : null;
    if (button) {
      event.preventDefault();
      copy(button);
    }
  });

  // The live host log: the session's event stream. EventSource reconnects by itself
  // and sends Last-Event-ID, so nothing is lost or repeated across a reconnect.
  var MAX_LINES = 500;
  function clock(iso) {
    var when = new Date(iso);
    return isNaN(when.getTime()) ? "" : when.toLocaleTimeString();
  }
  function shortTurn(id) {
    return id ? String(id).slice(0, 13) : "";
  }
  function hostText(data) {
    var d = data.data || {};
    if (typeof d.text === "string") { return d.text; }
    if (typeof d.message === "string") { return d.message; }
    var shown = JSON.stringify(d);
    return shown === "{}" ? "" : shown;
  }

  function startLog(log) {
    var url = log.getAttribute("data-events");
    var state = document.getElementById("log-state");
    if (!url || typeof EventSource === "undefined") { return; }
    var source = new EventSource(url);
    var pending = null;
    function add(text, cls) {
      var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
      var line = document.createElement("div");
      line.textContent = text;
      if (cls) { line.className = cls; }
      log.appendChild(line);
      while (log.childNodes.length > MAX_LINES) { log.removeChild(log.firstChild); }
      if (atEnd) { log.scrollTop = log.scrollHeight; }
    }
    function phaseChanged() {
      // A turn moved on: refresh the session's live part now rather than at the next poll.
      if (pending) { clearTimeout(pending); }
      pending = setTimeout(function () {
        pending = null;
        if (window.htmx) { window.htmx.trigger(document.body, "tk-phase"); }
      }, 300);
    }
    source.addEventListener("open", function () { if (state) { state.textContent = "live"; } });
    source.addEventListener("error", function () { if (state) { state.textContent = "reconnecting…"; } });
    source.addEventListener("host", function (event) {
      var data = JSON.parse(event.data);
      add(clock(data.at) + "  " + shortTurn(data.turn_id) + "  " + data.kind + "  " + hostText(data));
    });
    source.addEventListener("phase", function (event) {
      var data = JSON.parse(event.data);
      var extra = data.message || data.reason || "";
      add(clock(data.at) + "  " + shortTurn(data.turn_id) + "  ── " + data.phase +
          (data.kind ? " (" + data.kind + ")" : "") + (extra ? ": " + extra : ""), "phase-line");
      phaseChanged();
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  function start() {
    refreshTimes(document);
    setInterval(function () { refreshTimes(document); }, 10000);
    document.body.addEventListener("htmx:afterSwap", function (event) { refreshTimes(event.target); });
    var log = document.getElementById("log");
    if (log) { startLog(log); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
