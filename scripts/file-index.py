#!/usr/bin/env python3
"""Rewrites the "Every file" section of docs/architecture.md from the sources' own notes:
one line per file of crates/*/src and crates/*/tests with the first sentence of its `//!`
notes. Run it after adding, moving or removing a file (the layering test says which)."""
import os, re, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
def first_sentence(path):
    lines=[]
    for l in open(path, encoding='utf-8', errors='replace'):
        s=l.strip()
        if s.startswith('//!'):
            t=s[3:].strip()
            if not t and lines: break
            lines.append(t)
        elif s.startswith('#![') or (s=='' and not lines):
            continue
        else:
            break
    text=' '.join(x for x in lines if x).strip()
    if not text: return ''
    m=re.match(r'(.+?[.;])(\s|$)',text)
    t=m.group(1) if m else text
    t=t.rstrip('.;')
    if len(t)>160: t=t[:157].rsplit(' ',1)[0]+' …'
    return t
out=['## Every file','','The index of every source and test file: its path and the first words of its own notes (generated from them; `crates/proxy/tests/layering.rs` fails when a file of `crates/*/src` or `crates/*/tests` is named nowhere in this page).']
for c in sorted(os.listdir(f'{root}/crates')):
    files=[]
    for sub in ['src','tests']:
        base=f'{root}/crates/{c}/{sub}'
        for dp,dn,fn in os.walk(base):
            dn[:]=[d for d in dn if d not in ('node_modules','target')]
            files+= [os.path.join(dp,f) for f in fn if f.endswith('.rs')]
    if not files: continue
    out.append(''); out.append(f'### `crates/{c}`'); out.append('')
    for f in sorted(files):
        rel=os.path.relpath(f,root)
        d=first_sentence(f)
        out.append(f'- `{rel}`' + (f' — {d}' if d else ''))
index = '\n'.join(out) + '\n'
doc = os.path.join(root, 'docs', 'architecture.md')
text = open(doc, encoding='utf-8').read()
start = text.find('## Every file')
if start < 0:
    text = text.rstrip('\n') + '\n\n' + index
else:
    end = text.find('\n## ', start + 1)
    text = text[:start] + index + ('' if end < 0 else '\n' + text[end + 1:])
open(doc, 'w', encoding='utf-8').write(text)
