
975	INFO*
hello2
route_id
r1J	
