-- The SQL behind sqlite3.sktrace.gz, mallocbench's "sqlite3" pattern: the
-- calls sqlite3 3.40 made running it, recorded from the repository root with
--   build/bin/slabkit record --untimed -o sqlite3.sktrace -- sqlite3 :memory: \
--       < bench/malloc/traces/sqlite3.sql > /dev/null && gzip -9n sqlite3.sktrace
-- (394,421 calls, 2,148 blocks live at most, 3.8 MiB requested at the peak).
create table person(id integer primary key, name text, city text, born integer, note text);
create table visit(person integer, place text, at integer, cost real);
with recursive r(i) as (select 1 union all select i + 1 from r where i < 12000)
insert into person select i, 'person-' || i || '-' || substr('abcdefghijklmnopqrstuvwxyz', 1 + i % 26, 1 + i % 11),
  'city' || (i % 97), 1940 + i % 70, printf('%.*c', i % 60, 'n') from r;
with recursive r(i) as (select 1 union all select i + 1 from r where i < 30000)
insert into visit select 1 + (i * 7919) % 12000, 'place' || (i % 331), i * 13 % 100000, (i % 1000) / 7.0 from r;
create index person_city on person(city);
create index visit_person on visit(person, at);
select city, count(*), avg(born), group_concat(substr(name, 1, 12), ';') from person group by city order by 2 desc limit 5;
select p.name, count(v.place), sum(v.cost) from person p join visit v on v.person = p.id
  where p.born between 1950 and 1960 group by p.id order by 3 desc limit 5;
select json_group_array(json_object('id', id, 'name', name, 'city', city)) from person where id % 50 = 0;
select upper(name), length(note), replace(note, 'n', 'mm') from person where id % 997 = 0;
update person set note = note || '-' || city where id % 3 = 0;
delete from visit where at % 5 = 0;
select place, count(distinct person) from visit group by place order by place limit 3;
with t(w) as (select name from person order by name desc limit 2000) select count(*), max(w) from t;
