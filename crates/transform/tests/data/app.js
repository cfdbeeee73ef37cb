/*! app.js — licence header kept by minifiers */
'use strict';

// A small module of the kind a site ships: regex literals, template strings, division,
// automatic semicolon insertion and comments in awkward places.
const EMAIL = /^[^\s@]+@[^\s@]+\.[a-z]{2,}$/i;   // an email check
const SLASHES = /\/+/g;
const COMMENTISH = /\/\*.*?\*\//;  /* looks like a comment inside a regex */

function ratio(a, b) {
  return a / b / 2;          // two divisions, not a regex
}

function label(items, total) {
  const pct = Math.round(items.length / total * 100);
  return `${items.length} of ${total} (${pct}%) — ${items
    .map((x) => `<li class="${x.kind}">${x.name.replace(SLASHES, '/')}</li>`)
    .join('')}`;
}

let i = 1
let j = 2
i
++j
const k = i + +j - -1;

function asi() {
  return
    42;
}

const results = [];
for (const addr of ['a@b.io', 'not an email', 'x@y.com']) {
  results.push(EMAIL.test(addr) ? 'ok' : 'bad');
}

const doc = `multi
   line   template with   spaces
   and a // not a comment and /* nor this */`;

const obj = { a: 1, 'b c': 2, d: "quote's \"here\"" };
const tricky = [1 / 2, (3) / 4, obj.a / obj['b c'], 10 .toString(), typeof /x/];
const url = 'http://example.com/a//b'.replace(SLASHES, '/');

console.log(JSON.stringify({
  ratio: ratio(9, 3),
  label: label([{ kind: 'k', name: 'a//b' }, { kind: 'm', name: 'c' }], 4),
  i, j, k,
  asi: asi(),
  results,
  doc,
  commentish: COMMENTISH.test('x /* y */ z'),
  tricky,
  url,
}));
