// The dashboard's live part: the server renders every section; this only
// puts each one that changed in place, as the server sends it.
'use strict';
(() => {
  const live = document.getElementById('live');
  const say = (text, state) => {
    live.textContent = text;
    live.dataset.state = state;
  };
  const stream = new EventSource('/live');
  stream.addEventListener('sections', (e) => {
    const msg = JSON.parse(e.data);
    for (const [id, html] of Object.entries(msg.sections)) {
      const el = document.getElementById(id);
      if (el) {
        el.innerHTML = html;
      }
    }
    say('live · ' + msg.at, 'live');
  });
  stream.addEventListener('signedout', () => {
    stream.close();
    say('signed out: reload to sign in', 'off');
  });
  stream.onerror = () => {
    if (stream.readyState === EventSource.CLOSED) {
      say('disconnected: reload the page', 'off');
    } else {
      say('reconnecting…', 'wait');
    }
  };
})();
