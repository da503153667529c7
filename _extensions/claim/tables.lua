-- Every table sized from its content: pandoc gives a pipe table with a line longer than --columns relative column
-- widths from its dashes, which Typst then holds to (a column of long values got a sixth of the page and its cells
-- ran to twenty hyphenated lines). With the default widths Typst's auto columns and the browser's table layout
-- size each column from its cells, and wrap only what does not fit.
-- Shared by `quarto render` (the extension's filters) and offload-lab's pandoc + Typst build.
function Table(tbl)
  for i, spec in ipairs(tbl.colspecs) do
    tbl.colspecs[i] = { spec[1], nil }
  end
  return tbl
end
